"""Render ``factory eval fidelity`` results as a rich table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = ("psnr", "ssim", "iou", "copy_iou", "agent_iou", "block_err_px", "angle_err_deg")


def render_fidelity(result: dict[str, Any], console: Console | None = None) -> None:
    """Print the autoencoder line, the per-horizon table and the stability summary."""
    console = console or Console()
    console.print(
        f"model {result['model']} on {result['data']} ({result['episodes']} episodes): "
        f"autoencoder PSNR {result['ae_psnr']:.2f} dB, T IoU {result['ae_iou']:.3f}"
    )
    table = Table("horizon", *COLUMNS, title="replayed real actions from real context")
    for h, row in result["horizons"].items():
        table.add_row(h, *(f"{row[c]:.3f}" for c in COLUMNS))
    console.print(table)
    if "stability" in result:
        s = result["stability"]
        console.print(
            f"stability over {s['frames']} frames: nan={s['nan']}, "
            f"T-fraction ratio {s['t_fraction_ratio_min']:.2f}..{s['t_fraction_ratio_max']:.2f}, "
            f"block found {s['block_found_frac']:.3f}"
        )
    if "video" in result:
        console.print(f"video: {result['video']}")
