"""Crash-test generator: generates episodes in a (tiny) world model into a store until killed.

Usage: python tests/gen_writer_child.py STORE MODEL_DIR

It goes through ``factory generate``'s own path (``prepare_generate``, the rollout engine,
the single ``Writer``) but runs the engine in this process instead of on Ray. After each
episode is committed it prints ``committed <seed> <sha256 of its image and action bytes>``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

from factory.gen import RolloutEngine
from factory.gen.plan import GenerateConfig
from factory.gen.writer import Writer
from factory.generators import make_generator
from factory.model import load_model_dir
from pipelines.generate import prepare_generate


def digest(data: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for key in ("image", "action"):
        h.update(np.ascontiguousarray(data[key]).tobytes())
    return h.hexdigest()


def main() -> None:
    store, model_dir = Path(sys.argv[1]), Path(sys.argv[2])
    cfg = GenerateConfig(
        out=store, generator="play", episodes=10_000, model=model_dir, steps=4, batch_size=2
    )
    plan = prepare_generate(cfg)
    writer = Writer(plan, None)
    engine = RolloutEngine(load_model_dir(model_dir), make_generator, batch_size=2)
    print("ready", flush=True)
    for ep in engine.run(plan.jobs):
        writer.add(ep, "local", ("local",), 0)
        print("committed", ep.meta.seed, digest(ep.data), flush=True)


if __name__ == "__main__":
    main()
