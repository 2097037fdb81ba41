"""The ``factory train all`` command's console side: the plan line, one progress
display (stage, step, loss, time left) and the summary."""

from __future__ import annotations

from factory.train.all_stages import AllProgress
from pipelines.console import LazyBar, err_console, print_json
from pipelines.train_all import (
    TrainAllRequest,
    has_task_state,
    run_train_all,
    shares_for,
    validate,
)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = max(int(seconds), 0)
    return f"  left {s // 60}:{s % 60:02d}"


def train_all(req: TrainAllRequest, json_out: bool) -> None:
    """Run ``factory train all`` and report it (JSON on stdout with ``json_out``)."""
    budget, dev = validate(req)
    shares = shares_for(req, has_task_state(req.data))
    total = " + ".join(
        part
        for part in (
            f"{budget.minutes:g} min" if budget.minutes else "",
            f"{budget.steps} steps" if budget.steps else "",
        )
        if part
    )
    err_console.print(
        f"train all on {dev}, {total}: "
        + ", ".join(f"{stage} {frac:.0%}" for stage, frac in shares.items())
        + (
            f"; dynamics recipe {req.recipe}, camera {req.resolved_camera()}"
            if req.resolved_kind() == "latent_grid"
            else f"; kind {req.resolved_kind()}"
        )
        + " (latent cache, pack and eval run outside the shares)",
        highlight=False,
    )
    with LazyBar("train all") as bar:

        def on_progress(p: AllProgress) -> None:
            loss = p.metrics.get("loss")
            shown = f"[{p.index}/{p.n_stages} {p.stage}]" + (
                f" loss {loss:.4g}" if loss is not None else ""
            )
            bar.update(p.step, p.total_steps, shown + _clock(p.time_left_s))

        result = run_train_all(req, on_progress)
    if json_out:
        print_json(result)
        return
    for stage, rec in result["stages"].items():
        err_console.print(
            f"  {stage:<12} {rec['wall_s']:7.1f} s  {rec['steps']:>7} steps  "
            f"{rec['samples_per_s']:9.1f} samples/s",
            highlight=False,
        )
    err_console.print(f"[bold green]done[/]: model in {result['model']}")
    if "fidelity" in result:
        err_console.print(f"fidelity: {result['fidelity_file']}")
