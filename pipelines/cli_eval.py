"""``factory eval predictability``: how predictable the real world itself is.

factory eval predictability --data data/pile_heldout.zarr --jitter 0,0.01,0.1,0.5 --json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from pipelines.cli_app import eval_app
from pipelines.console import LazyBar, err_console, print_json, user_errors

COLUMNS = {  # world -> the row metrics shown in the table (all are in the JSON)
    "pile": ("disc_iou_top", "disc_iou_side", "disc_err_px", "swept_err"),
    "pusht": ("iou", "block_err_px", "angle_err_deg"),
}


def parse_jitters(text: str) -> tuple[float, ...]:
    """``"0,0.1"`` -> (0.0, 0.1): px values >= 0, each once, sorted; one line otherwise."""
    from factory.errors import FactoryError

    try:
        values = sorted({float(t) for t in text.split(",")})
    except ValueError:
        values = []
    if not values or any(not (v >= 0.0 and v < float("inf")) for v in values):
        raise FactoryError(f"--jitter takes px values >= 0 separated by commas, got {text!r}")
    return tuple(values)


@eval_app.command("predictability")
@user_errors
def eval_predictability(
    data: Annotated[Path, typer.Option("--data", help="Episodes recorded in the real world.")],
    jitter: Annotated[
        str, typer.Option(help="Start jitter per object coordinate, px (comma list).")
    ] = "0,0.01,0.1,0.5",
    episodes: Annotated[int, typer.Option(help="Episodes to replay.")] = 16,
    horizons: Annotated[str, typer.Option(help="Steps after the context (comma list).")] = (
        "1,10,50,100"
    ),
    seed: Annotated[int, typer.Option(help="Seed of the jitter.")] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay the store's actions in the real world from a start a little off: the
    fidelity a perfect model of these states would get, for each start error."""
    from factory.eval.fidelity import parse_horizons
    from factory.eval.predictability import run_predictability

    jitters, hs = parse_jitters(jitter), parse_horizons(horizons)
    with LazyBar("eval predictability") as bar:
        result = run_predictability(data, jitters, episodes, hs, seed=seed, on_progress=bar.update)
    if json_out:
        print_json(result)
        return
    _render(result)


def _render(result: dict[str, Any]) -> None:
    from rich.table import Table

    cols = COLUMNS[result["world"]]
    err_console.print(
        f"the {result['world']} world replaying {result['episodes']} episodes of "
        f"{result['data']} (jitter-free start lands {result['reproduced_px']:.2g} px off)"
    )
    for jitter, rows in result["references"].items():
        table = Table("horizon", *cols, title=f"start jitter {jitter} px")
        for h, row in rows.items():
            table.add_row(h, *("-" if row.get(c) is None else f"{row[c]:.3f}" for c in cols))
        err_console.print(table)
