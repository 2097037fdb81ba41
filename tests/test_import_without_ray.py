"""Training, collection and evaluation run where ray and lerobot are not installed (the
offline GPU recipe's machine): every process, env workers included, has them blocked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from factory.store import EpisodeStore

REPO = Path(__file__).resolve().parents[1]
BLOCKER = """
import importlib.abc, sys

class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ray", "lerobot"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, _Blocked())
"""
MODULES = (
    "pipelines.cli",
    "pipelines.collect",
    "pipelines.train_all",
    "pipelines.eval_fidelity",
    "factory.train.all_stages",
)


def _run(args: list[str], blocker_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=f"{blocker_dir}{os.pathsep}{REPO}", SDL_VIDEODRIVER="dummy")
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_collect_train_eval_import_without_ray_or_lerobot(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    blocked = _run(["-c", "import ray"], tmp_path)
    assert blocked.returncode != 0 and "blocked by the test" in blocked.stderr
    code = "; ".join(f"import {m}" for m in MODULES)
    code += "; import sys; assert not {'ray', 'lerobot'} & set(sys.modules)"
    imported = _run(["-c", code], tmp_path)
    assert imported.returncode == 0, imported.stderr
    store = tmp_path / "s.zarr"
    args = ["collect", "--episodes", "2", "--steps", "10", "--resolution", "32", "--workers", "2"]
    collected = _run(["-m", "pipelines.cli", *args, "--out", str(store)], tmp_path)
    assert collected.returncode == 0, collected.stderr
    with EpisodeStore.open(store) as written:
        assert written.n_episodes == 2
