"""A preview video of stored episodes, with the task score drawn on every frame.

    factory preview STORE --out preview.mp4 --episodes 4

For episodes made inside the world model, ``task_state`` holds the state probe's reading of
each generated frame, so the drawn score is the probe's (the same number the generator and
``--only-success`` used); for ground-truth episodes it is the simulator's.

A store of several cameras (pile: ``image`` top and ``image_side``) shows every camera of a
frame side by side, the main one first, as ``factory view`` does
(:func:`factory.view.store_view.camera_keys`, :func:`factory.view.png.beside`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from factory.envs.scoring import scorer_for
from factory.errors import FactoryError
from factory.store import EpisodeStore
from factory.view.png import beside
from factory.view.store_view import camera_keys

SCALE = 3  # 96 px frames become 288 px: readable text, small files


def annotate(frames: np.ndarray, scores: np.ndarray, success: np.ndarray, label: str) -> np.ndarray:
    """frames (T, H, W, 3) uint8 -> (T, H*SCALE, W*SCALE, 3) uint8 with a text strip.

    Each frame shows ``label``, the frame index and its score (T,), green where the
    world's success (T,) bool holds.
    """
    from PIL import Image, ImageDraw

    out = []
    for t, (frame, score, ok) in enumerate(zip(frames, scores, success, strict=True)):
        big = Image.fromarray(frame).resize(
            (frame.shape[1] * SCALE, frame.shape[0] * SCALE), Image.Resampling.NEAREST
        )
        draw = ImageDraw.Draw(big)
        draw.rectangle((0, 0, big.width, 14), fill=(0, 0, 0))
        colour = (80, 230, 80) if ok else (255, 255, 255)
        draw.text((3, 2), f"{label}  t={t:3d}  score {score:.2f}", fill=colour)
        out.append(np.asarray(big))
    return np.stack(out)


def write_preview(store_path: Path, out: Path, episodes: int = 4, fps: float | None = None) -> Path:
    """An mp4 (or gif, by ``out``'s suffix) of the store's first ``episodes`` episodes,
    every camera side by side (:func:`camera_frames`)."""
    import imageio.v2 as imageio

    if out.suffix not in (".mp4", ".gif"):
        raise FactoryError(f"preview must be .mp4 or .gif, got {out.name}")
    with EpisodeStore.open(store_path, mode="r") as store:
        if "image" not in store.schema.keys or "task_state" not in store.schema.keys:
            raise FactoryError(f"{store_path} needs data/image and data/task_state for a preview")
        env = str(store.attrs.get("env", "pusht"))
        score_fn = scorer_for(env.removesuffix("-model"))
        rate = fps or store.fps
        metas = store.all_meta()
        cams = camera_keys(store) or ["image"]
        names = "  " + " | ".join(camera_names(store, cams)) if len(cams) > 1 else ""
        gif = out.suffix == ".gif"
        kwargs: dict[str, Any] = (
            {"duration": 1.0 / rate, "loop": 0} if gif else {"fps": rate, "macro_block_size": 1}
        )
        with imageio.get_writer(str(out), **kwargs) as writer:
            for i in range(min(episodes, store.n_episodes)):
                ep = store.episode(i)
                scores, success = score_fn(np.asarray(ep["task_state"]))
                label = f"ep {i} {metas[i].generator} seed {metas[i].seed}{names}"
                for frame in annotate(camera_frames(ep, cams), scores, success, label):
                    writer.append_data(frame)  # type: ignore[attr-defined]
    return out


def camera_frames(episode: Any, cams: list[str]) -> np.ndarray:
    """The episode's frames of the camera keys ``cams`` (main first), side by side:
    (T, H, sum W_i + gaps, 3) uint8 (:func:`factory.view.png.beside`; one camera: itself)."""
    return beside([np.asarray(episode[k]) for k in cams])


def camera_names(store: EpisodeStore, cams: list[str]) -> list[str]:
    """The camera names of store keys ``cams``: ``image`` is the store's main named camera
    (its ``cameras`` attr's first, e.g. ``top``; else ``image``), ``image_<cam>`` is
    ``<cam>``."""
    named = store.attrs.get("cameras")
    main = str(named[0]) if isinstance(named, list) and named else "image"
    return [main if k == "image" else k.removeprefix("image_") for k in cams]
