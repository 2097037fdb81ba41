"""The demonstration stages of ``bench/zero_real_data.py``: R (real expert demos), G
(generated inside the model, kept by its own success reading), G's open-loop transfer to
the ground truth, the hold-still floor in each world, and M (half of each)."""

from __future__ import annotations

import shutil
from pathlib import Path

import zero_real_report as report
from zero_real_run import Run, hold_still, usable

from factory.store import EpisodeStore, merge_stores


def _rounds(
    run: Run, stage: str, store: Path, only_success: bool, base: list[str], env: dict[str, str]
) -> dict:
    """Rounds of N fresh seeds until N usable episodes or ``max_rounds`` rounds."""
    p, st = run.plan, run.stage(stage)
    while len(usable(store, only_success)) < p.n and st.get("rounds_done", 0) < p.max_rounds:
        r = st.get("rounds_done", 0)
        seed = p.demo_seed + r * p.n
        args = [
            *base,
            "--episodes",
            str(p.n),
            "--steps",
            str(p.demo_steps),
            "--seed",
            str(seed),
            "--out",
            str(store),
            "--json",
            *(["--append"] if store.exists() else []),
        ]
        run.cmd(stage, "factory", args, env=env)
        st["rounds_done"] = r + 1
        run.save()
    got = usable(store, only_success)
    stored = 0
    if store.exists():
        with EpisodeStore.open(store) as s:
            stored = s.n_episodes
    tried = st.get("rounds_done", 0) * p.n
    if len(got) < p.n:
        run.note(f"{stage}: {len(got)} usable demos of {p.n} after {tried} seeds tried")
    return {"seeds_tried": tried, "stored": stored, "usable": len(got), "used": min(p.n, len(got))}


def stage_r(run: Run) -> dict:
    base = ["collect", "--env", "pusht", "--generator", "expert", *run.plan.noise_args]
    return _rounds(run, "R", run.plan.path("stores", "R.zarr"), True, base, {})


def stage_g(run: Run) -> dict:
    p = run.plan
    base = [
        "generate",
        "--generator",
        "expert",
        "--batch-size",
        str(p.gen_batch),
        "--workers",
        "1",
        "--device",
        p.device,
        *([] if p.g_all else ["--only-success"]),
        *(["--model", p.model] if p.model else []),
        *p.noise_args,
        *([] if p.g_success_score is None else ["--success-score", str(p.g_success_score)]),
        *([] if p.g_robust_keep is None else ["--robust-keep", str(p.g_robust_keep)]),
        *(arg for judge in p.g_robust_judges for arg in ("--robust-judge", judge)),
    ]
    if p.g_all:
        run.note("G keeps failed generated episodes (--g-all): a plumbing check, not a result")
    return _rounds(run, "G", p.path("stores", "G.zarr"), not p.g_all, base, {})


def stage_transfer(run: Run) -> dict | None:
    """Replay G's demos open loop in the ground truth (``factory eval transfer``): do the
    generated successes succeed in the real task? Demos only, before any policy."""
    store = run.plan.path("stores", "G.zarr")
    if not usable(store, not run.plan.g_all):
        return None
    out = run.cmd("transfer", "factory", ["eval", "transfer", str(store), "--json"])
    keys = (
        "model_success",
        "real_success",
        "real_success_given_model_success",
        "block_err_px_median",
        "angle_err_deg_median",
    )
    return {k: out.get(k) for k in keys} | {"episodes": len(out.get("per_episode", []))}


def stage_null(run: Run) -> dict:
    """The floor in each world: a policy that holds the agent still, on the eval seeds."""
    return {world: hold_still(run.plan, world) for world in report.WORLDS}


def stage_m(run: Run) -> dict:
    p = run.plan
    r_store, g_store, m_store = (p.path("stores", f"{d}.zarr") for d in "RGM")
    half = p.n // 2
    r_pick = usable(r_store, True)[:half]
    taken = {seed for seed, _ in r_pick}
    g_pick = [x for x in usable(g_store, not p.g_all) if x[0] not in taken][: p.n - half]
    if not g_pick:
        run.note("M: no generated demos to mix; M not built")
        return {"skipped": True}
    if m_store.exists():
        shutil.rmtree(m_store)  # an interrupted merge
    sel = [[i for _, i in r_pick], [i for _, i in g_pick]]
    merge_stores([r_store, g_store], m_store, episodes=sel, attrs={"zero_real_data": "M"})
    run.state["commands"].append(
        {
            "stage": "M",
            "rc": 0,
            "wall_s": 0.0,
            "cmd": (
                f"python: factory.store.merge_stores([{str(r_store)!r}, {str(g_store)!r}], "
                f"{str(m_store)!r}, episodes={sel})"
            ),
        }
    )
    return {"real": len(r_pick), "generated": len(g_pick)}
