"""Render a store summary as rich tables (``factory inspect``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def render_summary(summary: dict[str, Any], console: Console | None = None) -> None:
    """Print ``EpisodeStore.summary()`` as a human-readable report on stdout."""
    console = console or Console()
    length = summary.get("length", {})
    console.print(f"[bold]{summary['path']}[/]")
    console.print(
        f"episodes {summary['episodes']}   frames {summary['frames']}   fps {summary['fps']}   "
        f"successes {summary['successes']}"
    )
    if length:
        console.print(
            f"episode length: min {length['min']}  mean {length['mean']:.1f}  max {length['max']}"
        )
    console.print(f"action: {summary.get('action_meaning', '')}")
    keys = Table("key", "shape", "dtype", title="data")
    for name, spec in summary["keys"].items():
        keys.add_row(name, str(tuple(spec["shape"])), spec["dtype"])
    console.print(keys)
    for field in ("sources", "generators"):
        counts = summary.get(field) or {}
        if counts:
            table = Table(field[:-1], "episodes")
            for k, v in counts.items():
                table.add_row(str(k), str(v))
            console.print(table)
