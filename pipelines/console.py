"""Console helpers for the CLI: one-line user errors, rich progress bars, JSON output.

Progress and messages go to stderr, so that ``--json`` output on stdout stays clean.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from factory.errors import FactoryError

err_console = Console(stderr=True)


def user_errors[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a :class:`FactoryError` into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except FactoryError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]: committed episodes are kept")
            raise typer.Exit(code=130) from None

    return wrapper


def setup_logging(verbose: bool = False) -> None:
    """Route library logs to stderr through rich."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False)],
        force=True,
    )


def progress() -> Progress:
    """A progress bar on stderr with count, elapsed and remaining time."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )


class LazyBar:
    """A one-task progress bar that appears only on its first update.

    Validation errors raised before any progress then print as a single clean line.
    Use as ``with LazyBar("train") as bar: bar.update(done, total, info)``.
    """

    def __init__(self, description: str) -> None:
        self.description = description
        self._progress: Progress | None = None
        self._task: Any = None

    def update(self, completed: int, total: int | None = None, info: str = "") -> None:
        if self._progress is None:
            self._progress = progress()
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=total, info=info)
        self._progress.update(self._task, completed=completed, total=total, info=info)

    def __enter__(self) -> LazyBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def print_json(obj: Any) -> None:
    """One JSON object on stdout."""
    sys.stdout.write(json.dumps(obj, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "__fspath__"):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
