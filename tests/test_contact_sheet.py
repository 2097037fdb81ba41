"""The contact sheet of a store: a row per episode of frames spaced first to last."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from store_factories import LENGTHS, H, W, make_episode, new_store

from factory.eval.contact_sheet import contact_sheet


def test_contact_sheet_rows_hold_each_episodes_spaced_frames(filled: Path, tmp_path: Path) -> None:
    from PIL import Image

    out = tmp_path / "sub" / "sheet.png"
    assert contact_sheet(filled, out, rows=4, cols=3, scale=2) == 4
    with Image.open(out) as im:
        sheet = np.asarray(im.convert("RGB"))
    assert sheet.shape == (4 * H * 2, 3 * W * 2, 3)
    for i in range(4):
        frames = make_episode(i, LENGTHS[i])["image"]
        first, middle, last = 0, round((LENGTHS[i] - 1) / 2), LENGTHS[i] - 1
        want = np.concatenate([frames[first], frames[middle], frames[last]], axis=1)
        got = sheet[i * H * 2 : (i + 1) * H * 2 : 2, ::2]  # every 2nd pixel: the originals
        np.testing.assert_array_equal(got, want)


def test_contact_sheet_of_an_empty_store_writes_nothing(tmp_path: Path) -> None:
    new_store(tmp_path / "empty").close()
    out = tmp_path / "sheet.png"
    assert contact_sheet(tmp_path / "empty", out) == 0 and not out.exists()
