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

ActionNoise = Annotated[
    float, typer.Option(help="DART: noise std on executed actions (px); labels kept.")
]
"""``--action-noise`` of the recording commands (collect, generate)."""
ActionNoiseCorr = Annotated[
    float, typer.Option(help="DART: the noise's AR(1) coefficient in [0, 1).")
]
"""``--action-noise-corr`` of the recording commands."""
GeneratorParams = Annotated[
    list[str] | None,
    typer.Option("--param", help="A generator knob KEY=VALUE (repeatable), e.g. settle_tol=3."),
]
"""``--param`` of the recording commands: the generator's own knobs (its params dataclass)."""


def generator_params(
    items: list[str] | None, action_noise: float, action_noise_corr: float
) -> dict[str, object]:
    """``--param KEY=VALUE`` items and the noise flags as one generator-parameter dict
    (values stay strings: the generator's params dataclass coerces and checks them)."""
    from factory.errors import FactoryError
    from factory.generators.dart import noise_params

    params: dict[str, object] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise FactoryError(f"--param {item!r} must look like KEY=VALUE")
        params[key.strip()] = value.strip()
    return params | noise_params(action_noise, action_noise_corr)


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
