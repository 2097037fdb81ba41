"""Render ``factory eval fidelity`` and ``factory eval transfer`` results for people."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = ("psnr", "ssim", "iou", "copy_iou", "agent_iou", "block_err_px", "angle_err_deg")


def render_fidelity(result: dict[str, Any], console: Console | None = None) -> None:
    """Print the reconstruction line, the per-horizon table and the stability summary."""
    console = console or Console()
    if result.get("world") == "pile":
        render_pile_fidelity(result, console)
        return
    console.print(
        f"{result.get('kind', 'latent_grid')} model {result['model']} on {result['data']} "
        f"({result['episodes']} episodes): {result['recon_of']} PSNR "
        f"{result['recon_psnr']:.2f} dB, T IoU {result['recon_iou']:.3f}, agent IoU "
        f"{result['recon_agent_iou']:.3f}"
    )
    titles = {
        "horizons": "replayed real actions from real context",
        "horizons_read_start": "the same, started from the reader's reading of the frames",
    }
    for key, title in titles.items():
        if key not in result:
            continue
        table = Table("horizon", *COLUMNS, title=title)
        for h, row in result[key].items():
            table.add_row(h, *(f"{row[c]:.3f}" for c in COLUMNS))
        console.print(table)
    if "reader_real" in result:
        p = result["reader_real"]
        console.print(
            f"{p['reader']} on {p['frames']} real frames: block {p['block_px']:.1f} px "
            f"(p95 {p['block_px_p95']:.1f}), angle {p['angle_deg']:.1f} deg, "
            f"agent {p['agent_px']:.1f} px"
        )
    if "permanence" in result:
        render_permanence(result["permanence"], console)
    if "stability" in result:
        s = result["stability"]
        console.print(
            f"stability over {s['frames']} frames: nan={s['nan']}, "
            f"T-fraction ratio {s['t_fraction_ratio_min']:.2f}..{s['t_fraction_ratio_max']:.2f}, "
            f"block found {s['block_found_frac']:.3f}"
        )
    if "video" in result:
        console.print(f"video: {result['video']}")


PILE_COLUMNS = {
    "PSNR": ("psnr", None),
    "disc IoU top (copy)": ("disc_iou_top", "copy_disc_iou_top"),
    "disc IoU side (copy)": ("disc_iou_side", "copy_disc_iou_side"),
    "swept err": ("swept_err", None),
    "disc err px": ("disc_err_px", None),
    "count gap (real)": ("count_gap", "real_count_gap"),
    "face count gap (real)": ("face_count_gap", "real_face_count_gap"),
    "centroid gap px (real)": ("centroid_gap_px", "real_centroid_gap_px"),
}
"""Column title -> (the row's key, the key shown in brackets beside it)."""


def render_pile_fidelity(result: dict[str, Any], console: Console) -> None:
    """The pile report: reconstruction, the per-horizon table (a metric the model cannot
    be scored on shows as -), what was skipped and the hold-still line."""
    console.print(
        f"{result['kind']} model {result['model']} on pile store {result['data']} "
        f"({result['episodes']} episodes): {result['recon_of']} PSNR "
        f"{result['recon_psnr']:.2f} dB, disc IoU {_num(result['recon_disc_iou'])}"
        + (
            f" (side {_num(result['recon_disc_iou_side'])})"
            if "recon_disc_iou_side" in result
            else ""
        )
    )
    if "recon_face_bias_side" in result:
        console.print(
            f"top faces at the true states: bias top {_num(result['recon_face_bias_top'])}, "
            f"side {_num(result['recon_face_bias_side'])} discs; count gap "
            f"{_num(result['recon_face_count_gap'])} "
            f"(real {_num(result['recon_real_face_count_gap'])})"
        )
    if "side_layers" in result:
        heights = "; ".join(
            f"{kind} " + ", ".join(f"{layer['z']:.1f}" for layer in layers)
            for kind, layers in result["side_layers"].items()
        )
        console.print(f"side sprite layers, board px above the floor (bottom first): {heights}")
    for key in ("horizons", "horizons_read_start"):
        if key not in result:
            continue
        table = Table("horizon", *PILE_COLUMNS, title=key)
        for h, row in result[key].items():
            cells = [
                _num(row.get(main)) + ("" if aside is None else f" ({_num(row.get(aside))})")
                for main, aside in PILE_COLUMNS.values()
            ]
            table.add_row(h, *cells)
        console.print(table)
    for metric, why in result.get("pile_skipped", {}).items():
        console.print(f"{metric}: not measured, {why}")
    hold = result.get("hold_still")
    if hold and hold.get("starts"):
        drift = "n/a" if "drift_skipped" in hold else f"{hold['disc_drift_px_max']:.2f} px"
        console.print(
            f"hold still ({hold['starts']} starts, {hold['steps']} steps): disc IoU vs start "
            f"{hold[f'disc_iou_top_{hold["steps"]}']:.3f}, largest disc drift {drift}"
        )
    elif hold:
        console.print(f"hold still: {hold.get('skipped', 'no start')}")
    if "video" in result:
        console.print(f"video: {result['video']}")


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_permanence(p: dict[str, Any], console: Console) -> None:
    """One line: T IoU against the start frame per horizon and the block's drift."""
    if not p.get("starts"):
        console.print("permanence: no start with the agent clear of a block at rest")
        return
    ious = ", ".join(
        f"{k.removeprefix('iou_')} {v:.3f}"
        for k, v in p.items()
        if k.startswith("iou_") and not k.endswith("_min")
    )
    console.print(
        f"permanence ({p['starts']} starts, agent held still {p['steps']} steps): "
        f"T IoU vs start at {ious}; block drift {p['block_drift_px']:.1f} px, "
        f"angle drift {p['angle_drift_deg']:.1f} deg (medians)"
    )


def render_transfer(r: dict[str, Any], console: Console | None = None) -> None:
    """Two lines: success rates inside the model and in the world, and the pose errors."""
    console = console or Console()
    given = r["real_success_given_model_success"]
    given_text = "n/a (no model success)" if given is None else f"{given:.0%}"
    console.print(
        f"{r['episodes']} episodes of {r['store']} replayed in {r['env']} "
        f"({r['skipped']} skipped): success in the model {r['model_success']:.0%}, "
        f"in the world {r['real_success']:.0%}, in the world given the model's {given_text}, "
        f"agreement {r['agreement']:.0%}"
    )
    if "disc_err_px_median" in r:
        console.print(
            "final discs: the model's reading vs the world, median "
            f"{r['disc_err_px_median']:.1f} px per disc (matched)"
        )
    else:
        console.print(
            "final block: the model's reading vs the world, median "
            f"{r['block_err_px_median']:.1f} px and {r['angle_err_deg_median']:.1f} deg"
        )
