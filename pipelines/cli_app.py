"""The ``factory`` typer app and its sub-command groups; commands live in ``cli_*.py``."""

from __future__ import annotations

from typing import Annotated

import typer

from pipelines.console import setup_logging

app = typer.Typer(
    name="factory",
    help="demofactory: synthetic robot demonstrations from a learned world model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
eval_app = typer.Typer(help="Evaluate a world model.", no_args_is_help=True)
model_app = typer.Typer(help="Manage model directories.", no_args_is_help=True)
export_app = typer.Typer(help="Export a store to another format.", no_args_is_help=True)
import_app = typer.Typer(help="Import a dataset into a store.", no_args_is_help=True)
policy_app = typer.Typer(help="Train lerobot policies on exported datasets.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks (each prints JSON with --json).", no_args_is_help=True)


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs.")] = False):
    setup_logging(verbose)


def add_groups() -> None:
    """Register the sub-command groups (after the top-level commands, for --help order)."""
    app.add_typer(eval_app, name="eval")
    app.add_typer(model_app, name="model")
    app.add_typer(export_app, name="export")
    app.add_typer(import_app, name="import")
    app.add_typer(policy_app, name="policy")
    app.add_typer(bench_app, name="bench")
