"""``factory view`` in real headless Chromium: the page lists the episodes (sorts,
filters, thumbnails), plays one, shows a generated episode next to its ground-truth
replay, and refuses another site's page and requests without the token."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from teleop_cdp import NEEDS_CHROMIUM, Browser, foreign_site
from view_factories import view_store

from dataview import DataViewServer
from factory.view import StoreView

pytestmark = NEEDS_CHROMIUM
TOKEN = "browser-view-token"
ROWS = "#episodes tbody tr"
COLUMN = "[...document.querySelectorAll('%s')].map(tr => tr.children[%d].textContent)"
MEAN = """(() => { const c = document.getElementById('%s');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let s = 0; for (let i = 0; i < d.length; i += 4) s += d[i] + d[i + 1] + d[i + 2];
  return s / (d.length / 4 * 3); })()"""
# Another site's page (teleop_cdp.foreign_site) that, token and all, tries to load the
# store's thumbnail and table; it reports back what happened.
FOREIGN_PAGE = """<!doctype html><body><script>
const report = (what) => fetch("/report?result=" + what);
const img = new Image();
img.onload = () => report("img-loaded"); img.onerror = () => report("img-refused");
img.src = "%(base)sapi/episodes/0/thumb.png?token=%(token)s";
fetch("%(base)sapi/episodes?token=%(token)s").then(() => report("fetch-read"),
                                                   () => report("fetch-refused"));
</script></body>"""


async def _status(page: Browser, path: str) -> int:
    result = await page.call(
        "Runtime.evaluate",
        expression=f"fetch({path!r}).then(r => r.status)",
        awaitPromise=True,
        returnByValue=True,
    )
    return int(result["result"]["value"])


async def _scrub(page: Browser, t: int) -> None:
    await page.evaluate(
        f"(() => {{ const s = document.getElementById('scrub'); s.value = '{t}';"
        "s.dispatchEvent(new Event('input')); })()"
    )


async def _table(page: Browser, out: dict[str, Any]) -> None:
    await page.wait_for(f"window.dataview && document.querySelectorAll('{ROWS}').length === 3")
    out["generators"] = await page.evaluate(COLUMN % (ROWS, 3))
    await page.evaluate("document.querySelector('th[data-key=generator]').click()")
    out["sorted"] = await page.evaluate(COLUMN % (ROWS, 3))
    await page.evaluate("document.querySelector('th[data-key=generator]').click()")
    out["reversed"] = await page.evaluate(COLUMN % (ROWS, 3))
    await page.evaluate(
        "(() => { const s = document.getElementById('search'); s.value = 'tiny@';"
        "s.dispatchEvent(new Event('input')); })()"
    )
    out["filtered"] = await page.evaluate(COLUMN % (ROWS, 1))
    await page.evaluate(
        "(() => { const s = document.getElementById('search'); s.value = '';"
        "s.dispatchEvent(new Event('input')); })()"
    )
    thumbs = f"[...document.querySelectorAll('{ROWS} img')]"
    await page.wait_for(f"{thumbs}.every(i => i.complete && i.naturalWidth > 0)")
    out["thumb_widths"] = await page.evaluate(f"{thumbs}.map(i => i.naturalWidth)")


async def _play(page: Browser, out: dict[str, Any]) -> None:
    await page.evaluate(f"document.querySelector('{ROWS}[data-index=\"0\"]').click()")
    await page.wait_for("window.dataview.sheets.model !== null")
    out["first_frame_mean"] = await page.evaluate(MEAN % "model")
    await page.evaluate("document.getElementById('play').click()")
    await page.wait_for("window.dataview.frame >= 4")
    await page.evaluate("document.getElementById('play').click()")
    out["played"] = await page.evaluate("[window.dataview.playing, window.dataview.frame]")
    out["real_hidden"] = await page.evaluate("document.getElementById('real-figure').hidden")


async def _side_by_side(page: Browser, out: dict[str, Any]) -> None:
    await page.evaluate(f"document.querySelector('{ROWS}[data-index=\"1\"]').click()")
    await page.wait_for("window.dataview.replayStatus === 'ready'", timeout=180)
    await _scrub(page, 5)
    out["at"] = await page.evaluate("window.dataview.frame")
    out["model_mean"] = await page.evaluate(MEAN % "model")
    out["real_mean"] = await page.evaluate(MEAN % "real")
    out["real_shown"] = not await page.evaluate("document.getElementById('real-figure').hidden")
    out["info"] = await page.evaluate("document.getElementById('replay-info').textContent")


def test_the_page_lists_plays_compares_and_refuses_strangers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    made = view_store(tmp_path / "view.zarr")
    view = StoreView(tmp_path / "view.zarr")
    server = DataViewServer(view, port=0, token=TOKEN)
    server.open()
    out: dict[str, Any] = {}
    shot = tmp_path / "view.png"

    async def browse() -> None:
        async with Browser(server.location, tmp_path / "profile") as page:
            await page.call(
                "Emulation.setDeviceMetricsOverride",
                width=1300,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            await _table(page, out)
            await _play(page, out)
            await _side_by_side(page, out)
            await page.screenshot(shot)
            out["no token"] = await _status(page, "/api/episodes")
            out["with token"] = await _status(page, f"/api/episodes?token={TOKEN}")
            reports: asyncio.Queue[str] = asyncio.Queue()
            html = FOREIGN_PAGE % {"base": server.address, "token": TOKEN}
            runner, foreign = await foreign_site(html, reports)
            try:
                tab = await page.open_tab(foreign)
                got = [await asyncio.wait_for(reports.get(), 60) for _ in range(2)]
                out["foreign"] = sorted(got)
                await page.close_tab(tab)
            finally:
                await runner.cleanup()

    try:
        asyncio.run(browse())
    finally:
        server.close()
        view.close()
    assert out["generators"] == ["play", "expert", "keyboard"]
    assert out["sorted"] == ["expert", "keyboard", "play"]
    assert out["reversed"] == ["play", "keyboard", "expert"]
    assert out["filtered"] == ["1"]
    assert out["thumb_widths"] == [32, 32, 32]
    real, generated = made["real"]["image"], made["generated"]["image"]
    assert out["first_frame_mean"] == pytest.approx(real[0].mean(), abs=0.5)
    playing, frame = out["played"]
    assert playing is False and frame >= 4 and out["real_hidden"] is True
    assert out["at"] == 5 and out["real_shown"]
    assert out["model_mean"] == pytest.approx(generated[5].mean(), abs=0.5)
    assert out["real_mean"] == pytest.approx(real[5].mean(), abs=0.5)
    assert abs(out["model_mean"] - out["real_mean"]) > 50  # two streams, not one twice
    assert "reset by config" in out["info"] and "5.0 px" in out["info"], out["info"]
    assert out["no token"] == 403 and out["with token"] == 200
    assert out["foreign"] == ["fetch-refused", "img-refused"]
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert any("no token" in m for m in refused), refused
    assert any("Origin 'http://127.0.0.1:" in m for m in refused), refused  # the fetch
    assert any("same-site request" in m for m in refused), refused  # the image
    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape[1] == 1300 and image.std() > 10
