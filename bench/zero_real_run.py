"""The machinery of ``bench/zero_real_data.py``: its plan, its ``state.json`` and command
log, and readers of the stores and lerobot runs it makes."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import zero_real_report as report
from zero_real_policies import state_policy

from factory.stages import StageRun
from factory.store import EpisodeStore

log = logging.getLogger("zero_real_data")
BIN = Path(sys.executable).parent
LEROBOT_ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


class StageError(RuntimeError):
    """A command failed; the message names its log."""


@dataclass(frozen=True)
class Plan:
    """Every setting of one experiment (``state.json``'s ``config``); see the CLI help."""

    work: str
    n: int
    sizes: tuple[int, ...]
    episodes: int
    eval_batch: int
    episode_length: int
    state_policy: str  # a name in zero_real_policies
    state_steps: int  # at N demos; a dataset of k demos trains k/N as many (the same epochs)
    state_saves: tuple[float, ...]  # also checkpoint at these fractions of each run
    state_batch: int
    image_policy: str
    image_steps: int
    image_lengths: int
    image_batch: int
    num_workers: int
    eval_seed: int
    demo_seed: int
    demo_steps: int
    max_rounds: int
    gen_batch: int
    train_seed: int
    device: str
    model: str | None
    g_all: bool
    action_noise: float = 0.0
    g_success_score: float | None = None  # G: the model's stricter success reading
    g_robust_keep: float | None = None  # G: keep demos at least this robust in the model
    g_robust_judges: tuple[str, ...] = ()  # G: judges' dynamics that replay them too

    @property
    def noise_args(self) -> list[str]:
        """The demos' collection and generation flags: DART noise injection (the expert's
        executed actions perturbed, its clean actions kept as labels), or none."""
        return ["--action-noise", str(self.action_noise)] if self.action_noise else []

    @property
    def actions(self) -> str:
        """What the exports' ``action`` holds: the expert's labels under noise injection."""
        return "label" if self.action_noise else "executed"

    def path(self, *parts: str) -> Path:
        return Path(self.work, *parts)

    def config(self) -> dict[str, Any]:
        cfg = asdict(self)
        cfg.pop("work")
        if not self.action_noise:
            cfg.pop("action_noise")  # the experiments made before the option keep their config
        if self.g_success_score is None:
            cfg.pop("g_success_score")  # ... and before this one
        if self.g_robust_keep is None:
            cfg.pop("g_robust_keep")  # ... and this one
        if self.g_robust_judges:
            cfg["g_robust_judges"] = list(self.g_robust_judges)
        else:
            cfg.pop("g_robust_judges")  # ... and this one
        cfg["sizes"], cfg["state_saves"] = list(self.sizes), list(self.state_saves)
        cfg["state_candidate"] = state_policy(self.state_policy).record()
        cfg["eval_seeds"] = [self.eval_seed, self.eval_seed + self.episodes - 1]
        return cfg

    def state_schedule(self, dataset: str) -> tuple[int, list[int]]:
        """(steps, checkpoint steps) of the state arm on ``dataset`` (``R30``): k/N of
        ``state_steps`` for k demos, checkpointed at each of ``state_saves`` and the end."""
        steps = max(1, round(self.state_steps * int(dataset[1:]) / self.n))
        saves = {max(1, round(f * steps)) for f in self.state_saves if 0 < f < 1}
        return steps, sorted({*saves, steps})

    def datasets(self, arm: str) -> list[str]:
        """The state arm trains on R and G at every size and on M at N (those at N first);
        the image arm on R, G and M at N."""
        if arm == "image":
            return [f"R{self.n}", f"G{self.n}", f"M{self.n}"]
        fewer = sorted((k for k in self.sizes if k != self.n), reverse=True)
        small = [f"{fam}{k}" for k in fewer for fam in "RG"]
        return [f"R{self.n}", f"G{self.n}", f"M{self.n}", *small]  # the results first


ARM_KEYS = {  # the settings only an arm's training and evaluation depend on
    "state": ("state_policy", "state_candidate", "state_steps", "state_saves", "state_batch"),
    "image": ("image_policy", "image_steps", "image_lengths", "image_batch", "num_workers"),
}


def changed_arms(
    work: str, old: dict[str, Any], new: dict[str, Any], restart: Collection[str]
) -> list[str]:
    """The arms whose settings changed between configs ``old`` and ``new``, all of them
    in ``restart``; ``ValueError`` when a shared setting changed or an arm is not."""
    own = {k for keys in ARM_KEYS.values() for k in keys}
    shared = sorted(k for k in old.keys() | new.keys() if k not in own and old.get(k) != new.get(k))
    if shared:
        raise ValueError(f"{work} was made with other settings ({', '.join(shared)}); "
                         "use a new --work")  # fmt: skip
    arms = [a for a, keys in ARM_KEYS.items() if any(old.get(k) != new.get(k) for k in keys)]
    for arm in arms:
        if arm not in restart:
            diff = ", ".join(k for k in ARM_KEYS[arm] if old.get(k) != new.get(k))
            raise ValueError(
                f"{work}: its {arm} arm was made with other settings ({diff}); pass "
                f"--restart-arm {arm} to redo that arm (its runs and scores move to "
                "WORK/superseded/, its demos and exports are kept), or use a new --work"
            )
    return arms


class Run(StageRun):
    """``WORK/state.json``: config, stages (status, wall_s, info), commands, notes, and
    the records of arms redone with other settings (``superseded``)."""

    def __init__(
        self, plan: Plan, name: str = "state.json", restart: Collection[str] = (), jobs: int = 1
    ) -> None:
        self.plan = plan
        self.jobs = jobs  # commands of a stage run at once (Run.cmds); not part of the config
        file = plan.path(name)
        redo: list[str] = []
        if file.is_file():
            state = StageRun.load(file).state
            for rec in state["stages"].values():  # a run begun before the status field
                if rec.pop("done", False):
                    rec["status"] = "done"
            if state["config"] != plan.config():
                redo = changed_arms(plan.work, state["config"], plan.config(), restart)
        else:
            state = {"config": plan.config(), "stages": {}, "commands": [], "notes": []}
            plan.path("logs").mkdir(parents=True, exist_ok=True)
        super().__init__(file, state)
        for arm in redo:
            self._supersede(arm)
        self.state["config"] = plan.config()
        self.save()

    def _supersede(self, arm: str) -> None:
        """Move the arm's runs and scores to ``WORK/superseded/ARM-K/``, forget its
        training and evaluation stages, and mark their commands (here and in
        ``eval_ahead.json``) as superseded; the record keeps the old settings."""
        p, old = self.plan, self.state["config"]
        k = len(self.state.get("superseded", []))
        dest = p.path("superseded", f"{arm}-{k}")
        dest.mkdir(parents=True, exist_ok=True)
        for sub in ("train", "eval"):
            if p.path(sub, arm).exists():
                p.path(sub, arm).rename(dest / sub)
        stages = {f"{what}_{arm}" for what in ("train", "eval")}
        popped = {s: self.stages.pop(s) for s in sorted(stages) if s in self.stages}
        ahead = p.path("eval_ahead.json")
        logs = [self.state] + ([json.loads(ahead.read_text())] if ahead.is_file() else [])
        for st in logs:
            for c in st["commands"]:
                if c["stage"] in stages:
                    c.setdefault("superseded", str(dest))
        if len(logs) > 1:
            logs[1]["config"] = p.config()
            ahead.write_text(json.dumps(logs[1], indent=1))
        record = {"arm": arm, "folder": str(dest), "stages": popped,
                  "config": {key: old.get(key) for key in ARM_KEYS[arm]}}  # fmt: skip
        self.state.setdefault("superseded", []).append(record)
        log.warning("the %s arm's old runs and scores moved to %s", arm, dest)

    def note(self, text: str) -> None:
        if text not in self.state["notes"]:
            self.state["notes"].append(text)
            log.warning(text)

    def do(self, name: str, fn: Callable[[Run], Any]) -> None:
        """Stage ``name`` (skipped when done, except the report); ``fn``'s result is the
        stage's ``info``."""

        def stage(_rec: dict[str, Any]) -> dict[str, Any] | None:
            info = fn(self)
            return None if info is None else {"info": info}

        self.run(name, stage, again=name == "report")

    def cmd(
        self, stage: str, exe: str, args: list[str], *, env: dict[str, str] | None = None
    ) -> Any:
        """Run one command (its log in WORK/logs) with ``env`` added to this process's
        environment; a factory ``--json`` stdout is parsed."""
        return self.cmds(stage, exe, [args], env=env)[0]

    def cmds(
        self, stage: str, exe: str, arg_lists: list[list[str]], *,
        env: dict[str, str] | None = None, on_done: Callable[[int, Any], None] | None = None,
    ) -> list[Any]:  # fmt: skip
        """Run the commands ``exe ARGS`` for each of ``arg_lists``, ``self.jobs`` at a time
        (each with its share of the cores, :func:`threads_per_job`, when more run), in
        order; each is logged as it ends, and ``on_done(i, output)`` called for each that
        succeeds. Returns their parsed ``--json`` outputs, in order. A failure lets the
        others end, then raises :class:`StageError`."""
        extra = dict(env or {})
        if self.jobs > 1 and len(arg_lists) > 1:
            extra.setdefault("OMP_NUM_THREADS", str(threads_per_job(self.jobs)))
        waiting = list(enumerate(arg_lists))
        running: list[tuple[int, _Job]] = []
        out: list[Any] = [None] * len(arg_lists)
        failed: list[str] = []
        try:
            while waiting or running:
                while waiting and len(running) < max(1, self.jobs):
                    i, args = waiting.pop(0)
                    running.append((i, self._launch(stage, exe, args, extra, len(running))))
                time.sleep(0.05)
                for item in [r for r in running if r[1].proc.poll() is not None]:
                    running.remove(item)
                    i, job = item
                    try:
                        out[i] = self._finish(job)
                    except StageError as err:
                        failed.append(str(err))
                        continue
                    if on_done is not None:
                        on_done(i, out[i])
        except BaseException:  # an interrupt: no command outlives the run
            for _, job in running:
                job.proc.kill()
                job.proc.wait()
            raise
        if failed:
            raise StageError("; ".join(failed))
        return out

    def _launch(
        self, stage: str, exe: str, args: list[str], env: dict[str, str], in_flight: int
    ) -> _Job:
        argv = [str(BIN / exe), *args]
        shown = " ".join(f"{k}={v}" for k, v in env.items())
        shown = f"{shown} {shlex.join([_rel(argv[0]), *args])}".strip()
        k = len(self.state["commands"]) + in_flight
        log_path = self.plan.path("logs", f"{k:03d}_{stage}.log")
        log.info("$ %s", shown)
        err = log_path.open("w")
        json_out = log_path.with_suffix(".stdout") if "--json" in args else None
        out = json_out.open("w") if json_out is not None else err
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env={**os.environ, **env})
        if out is not err:
            out.close()
        err.close()
        return _Job(stage, shown, log_path, json_out, proc, time.monotonic())

    def _finish(self, job: _Job) -> Any:
        """Record an ended command; its parsed ``--json`` stdout (None without one)."""
        rc = job.proc.wait()
        self.state["commands"].append(
            {
                "stage": job.stage,
                "cmd": job.shown,
                "rc": rc,
                "wall_s": round(time.monotonic() - job.t0, 1),
                "log": str(job.log_path),
            }
        )
        self.save()
        text = ""
        if job.json_out is not None:
            text = job.json_out.read_text()
            job.json_out.unlink()
            with job.log_path.open("a") as f:
                f.write(text)
        if rc != 0:
            raise StageError(f"{job.stage}: command failed (exit {rc}); see {job.log_path}")
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return None


@dataclass
class _Job:
    """A command that :meth:`Run.cmds` started."""

    stage: str
    shown: str
    log_path: Path
    json_out: Path | None
    proc: subprocess.Popen[str]
    t0: float


def threads_per_job(jobs: int) -> int:
    """Torch threads (``OMP_NUM_THREADS``) of each of ``jobs`` commands run at once: an
    equal share of this machine's cores, at least one."""
    return max(1, (os.cpu_count() or 1) // jobs)


def _rel(path: str) -> str:
    try:
        return os.path.relpath(path) if Path(path).is_relative_to(Path.cwd()) else path
    except ValueError:
        return path


def usable(store: Path, only_success: bool) -> list[tuple[int, int]]:
    """(seed, index) of a store's episodes (only the successful ones), sorted by seed."""
    if not store.exists():
        return []
    with EpisodeStore.open(store) as st:
        metas = st.all_meta()
    got = [(m.seed or 0, i) for i, m in enumerate(metas) if m.success or not only_success]
    return sorted(got)


def picked(run: Run, name: str) -> list[int] | None:
    """Store indices of dataset ``name`` (``R30``: the first 30 real demos by seed), or
    None when its store holds fewer usable demos. ``M<n>`` is all of ``M.zarr``."""
    p = run.plan
    fam, k = name[0], int(name[1:])
    store = p.path("stores", f"{fam}.zarr")
    if fam == "M":
        if not store.exists() or run.stage("M").get("info", {}).get("skipped"):
            return None
        with EpisodeStore.open(store) as st:
            return list(range(st.n_episodes))
    got = usable(store, fam == "R" or not p.g_all)
    return [i for _, i in got[:k]] if len(got) >= k else None


def datasets(run: Run, arm: str) -> list[str]:
    """The arm's datasets that have their demonstrations (a note names any missing)."""
    out = []
    for name in run.plan.datasets(arm):
        if picked(run, name) is None:
            run.note(f"{arm} arm: {name} not trained (too few demos)")
        else:
            out.append(name)
    return out


def checkpoints(run_dir: Path) -> dict[int, Path]:
    """Step -> ``pretrained_model`` folder of each finished checkpoint of a lerobot run."""
    root = run_dir / "checkpoints"
    found = root.glob("*/pretrained_model/model.safetensors") if root.is_dir() else []
    return {int(f.parent.parent.name): f.parent for f in found if f.parent.parent.name.isdigit()}


def hold_still(p: Plan, world_name: str) -> dict[str, float]:
    """The ``hold_still`` generator (:class:`factory.generators.hold_still.HoldStill`) on
    the evaluation seeds, in the ground truth (``real``) or in the world lerobot-eval's
    ``demofactory`` env steps (``model``): its success rate and mean max reward, as
    lerobot-eval scores a checkpoint. Any success or reward gain in the model comes from
    the model moving the block by itself."""
    import numpy as np

    from exporters.lerobot_plugin import open_world
    from factory.envs import make_world
    from factory.envs.model_vector_env import pusht_reward
    from factory.generators import make_generator
    from factory.record.runner import EpisodeRunner, EpisodeSpec

    n = p.episodes
    world = (
        make_world("pusht", batch_size=n)
        if world_name == "real"
        else open_world(p.model, p.device, n)
    )
    specs = [EpisodeSpec(seed=p.eval_seed + i, steps=p.episode_length) for i in range(n)]
    try:
        source = "real" if world_name == "real" else "world_model"
        results = EpisodeRunner(world, source=source, record=False).run(
            [make_generator("hold_still") for _ in range(n)], specs
        )
    finally:
        world.close()
    best = pusht_reward(np.array([r.meta.extra["max_score"] for r in results]))
    success = np.mean([r.meta.success for r in results])
    return {"success": round(float(success), 6), "max_reward": round(float(best.mean()), 6)}


def score_rows(p: Plan) -> list[dict[str, Any]]:
    """One row per ``WORK/eval/ARM/DATASET/STEP/WORLD/eval_info.json``."""
    rows = []
    for f in sorted(p.path("eval").glob("*/*/*/*/eval_info.json")):
        arm, d, step, world = f.parts[-5:-1]
        row = {"arm": arm, "dataset": d, "step": int(step), "world": world}
        rows.append({**row, **report.read_eval(f)})
    return sorted(rows, key=lambda r: (r["arm"], r["dataset"], r["step"], r["world"]))
