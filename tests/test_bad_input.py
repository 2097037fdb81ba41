"""One bad-input matrix: every ``factory`` command, and the two lerobot plugins, refuses
bad input with exit status 2 and one line on stderr, without a traceback, leaving every
store and model it was given byte-for-byte unchanged and no output behind.

The inputs are built once per module: 32 px stores made by ``factory collect``, damaged or
foreign copies of them, tiny models (tests/factories.py) and a state-only LeRobot dataset
made by ``factory export lerobot``. Each case runs in its own empty scratch folder
(outputs go there), and the fixture folder and the scratch folder are hashed, file by
file, before and after the run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr
from factories import write_tiny_model_dir, write_tiny_object_state_dir
from typer.testing import CliRunner

from factory.store import EpisodeStore, KeySpec, StoreSchema
from pipelines.cli import app

runner = CliRunner()
BIN = Path(sys.executable).parent
RES = "32"


@dataclass(frozen=True)
class Inputs:
    """The module's inputs: stores, models, a LeRobot dataset and a taken port."""

    base: Path
    port: int

    def __getattr__(self, name: str) -> str:  # fx.good -> str(base / "good")
        if name.startswith("_"):
            raise AttributeError(name)
        return str(self.base / name)


def tree_hash(root: Path) -> dict[str, str]:
    """``{relative path: sha256 of the file, or "dir"}`` for everything under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def _collect(out: Path, *extra: str) -> None:
    args = ["collect", "--out", str(out), "--steps", "12", "--resolution", RES, *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


def _derive(
    src: Path, out: Path, drop: str = "", action_dim: int = 2, generated: bool = False
) -> None:
    """A store made from ``src``'s episodes: without key ``drop``, with ``action_dim``-D
    actions (extra dimensions zero) and, ``generated``, with the metadata of episodes that
    ``factory generate`` made from seeded resets."""
    with EpisodeStore.open(src) as s:
        keys = {k: v for k, v in s.schema.keys.items() if k != drop}
        keys["action"] = KeySpec((action_dim,), "float32")
        schema = StoreSchema(keys)
        with EpisodeStore.create(out, schema, fps=s.fps, action_meaning=s.action_meaning) as new:
            for ep in s:
                data = {k: np.asarray(ep[k]) for k in keys if k != "action"}
                pad = np.zeros((ep.length, action_dim - 2), np.float32)
                data["action"] = np.concatenate([ep["action"], pad], axis=1)
                meta = s.episode_meta(ep.index)
                if generated:
                    first = np.concatenate([ep["state"][0], ep["task_state"][0]])
                    extra = {"initial": "seed", "initial_config": first.tolist()}
                    meta = dataclasses.replace(meta, source="world_model", extra=extra)
                new.append_episode(data, meta)


def _nan_copy(src: Path, out: Path, frame: int) -> None:
    """``src`` with the action of ``frame`` NaN."""
    shutil.copytree(src, out)
    zarr.open_array(out / "data" / "action", mode="r+")[frame] = np.nan


def _build_stores(base: Path) -> None:
    good = base / "good"
    _collect(good, "--episodes", "2")
    _collect(base / "res64", "--episodes", "1", "--resolution", "64")
    (base / "notstore").mkdir()
    (base / "notstore" / "notes.txt").write_text("not an episode store\n")
    shutil.copytree(good, base / "truncated")
    meta = base / "truncated" / "zarr.json"
    meta.write_bytes(meta.read_bytes()[: len(meta.read_bytes()) // 2])
    _nan_copy(good, base / "nan", 3)  # in episode 0
    _derive(good, base / "noimage", drop="image")
    _derive(good, base / "act3", drop="task_state", action_dim=3)
    _derive(good, base / "gen", generated=True)
    _derive(good, base / "gen3", action_dim=3, generated=True)
    _nan_copy(base / "gen", base / "gen_nan", 15)  # in episode 1 of 2


def _build_models(base: Path) -> None:
    tiny = write_tiny_model_dir(base / "tiny")
    write_tiny_object_state_dir(base / "os")
    write_tiny_model_dir(base / "a3", action_dim=3)
    shutil.copytree(tiny, base / "corrupt")
    weights = base / "corrupt" / "dynamics.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    shutil.copytree(tiny, base / "noweights")
    (base / "noweights" / "dynamics.safetensors").unlink()


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inputs]:
    base = tmp_path_factory.mktemp("bad_input")
    _build_stores(base)
    _build_models(base)
    args = ["export", "lerobot", str(base / "good"), str(base / "ds"), "--repo-id", "local/bad"]
    result = runner.invoke(app, [*args, "--obs", "environment_state_agent_pos"])
    assert result.exit_code == 0, result.output
    with socket.socket() as sock:  # a port that is taken for the whole module
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield Inputs(base, sock.getsockname()[1])


Args = Callable[[Inputs, Path], list[str]]


@dataclass(frozen=True)
class Case:
    """One bad input: ``args(inputs, scratch)`` is the command line, ``needle`` a part of
    the one error line that names the problem."""

    id: str
    args: Args
    needle: str


def c(id: str, args: Args, needle: str, *marks: pytest.MarkDecorator) -> object:
    return pytest.param(Case(id, args, needle), id=id, marks=marks)


OUT = "--out"
SHIPPED = str(Path(__file__).resolve().parents[1] / "models" / "pusht")
COLLECT = ["collect", "--steps", "12", "--resolution", RES]
TRAIN_STEPS = ["--steps", "2", "--device", "cpu"]
SCRIPTED = ["teleop", "--device", "scripted", "--headless", "--episodes", "1", "--steps", "4"]
# fmt: off
CASES = [
    # collect
    c("collect-episodes-0", lambda f, t: [*COLLECT, OUT, f"{t}/o", "--episodes", "0"],
      "--episodes"),
    c("collect-workers-0", lambda f, t: [*COLLECT, OUT, f"{t}/o", "--workers", "0"], "--workers"),
    c("collect-steps-0", lambda f, t: ["collect", OUT, f"{t}/o", "--steps", "0"], "--steps"),
    c("collect-unknown-generator", lambda f, t: [*COLLECT, OUT, f"{t}/o", "--generator", "nope"],
      "nope"),
    c("collect-unknown-env", lambda f, t: [*COLLECT, OUT, f"{t}/o", "--env", "nope"], "nope"),
    c("collect-replay-not-a-store",
      lambda f, t: [*COLLECT, OUT, f"{t}/o", "--generator", "replay", "--source", f.notstore],
      "not a zarr store"),
    c("collect-replay-nan-actions",
      lambda f, t: [*COLLECT, OUT, f"{t}/o", "--generator", "replay", "--source", f.nan],
      "finite"),
    c("collect-append-other-resolution",
      lambda f, t: ["collect", OUT, f.good, "--append", "--episodes", "3", "--resolution", "64"],
      "different schema"),
    c("collect-append-other-action-dim",
      lambda f, t: [*COLLECT, OUT, f.act3, "--append", "--episodes", "3"], "action"),
    # inspect
    c("inspect-missing", lambda f, t: ["inspect", f"{t}/missing"], "does not exist"),
    c("inspect-truncated-zarr-json", lambda f, t: ["inspect", f.truncated], "corrupt"),
    c("inspect-not-a-store", lambda f, t: ["inspect", f.notstore], "not a zarr store"),
    # train, one stage
    c("train-autoencoder-no-image",
      lambda f, t: ["train", "autoencoder", "--data", f.noimage, OUT, f"{t}/m", *TRAIN_STEPS],
      "image"),
    c("train-probe-truncated-store",
      lambda f, t: ["train", "probe", "--data", f.truncated, OUT, f"{t}/m", *TRAIN_STEPS],
      "corrupt"),
    c("train-dynamics-wrong-resolution",
      lambda f, t: ["train", "dynamics", "--data", f.res64, OUT, f.tiny, *TRAIN_STEPS], "64"),
    c("train-dynamics-other-action-dim",
      lambda f, t: ["train", "dynamics", "--data", f.act3, OUT, f.tiny, *TRAIN_STEPS], "action"),
    c("train-decoder-missing-weights",
      lambda f, t: ["train", "decoder", "--data", f.good, OUT, f.noweights, *TRAIN_STEPS],
      "dynamics.safetensors"),
    c("train-heads-corrupt-weights",
      lambda f, t: ["train", "heads", "--data", f.good, OUT, f.corrupt, *TRAIN_STEPS],
      "safetensors"),
    c("train-autoencoder-steps-0",
      lambda f, t: ["train", "autoencoder", "--data", f.good, OUT, f"{t}/m", "--steps", "0"],
      "positive"),
    c("train-probe-device-tpu",
      lambda f, t: ["train", "probe", "--data", f.good, OUT, f"{t}/m", "--steps", "2",
                    "--device", "tpu"], "tpu"),
    c("train-unknown-stage",
      lambda f, t: ["train", "nope", "--data", f.good, OUT, f"{t}/m", *TRAIN_STEPS], "nope"),
    c("train-unknown-kind",
      lambda f, t: ["train", "dynamics", "--kind", "nope", "--data", f.good, OUT, f"{t}/m",
                    *TRAIN_STEPS], "nope"),
    c("train-dynamics-unknown-recipe",
      lambda f, t: ["train", "dynamics", "--recipe", "nope", "--data", f.good, OUT, f"{t}/m",
                    *TRAIN_STEPS], "nope"),
    c("train-renderer-no-gt-state",
      lambda f, t: ["train", "renderer", "--data", f.act3, OUT, f"{t}/m", *TRAIN_STEPS],
      "task_state"),
    c("train-reader-wrong-resolution",
      lambda f, t: ["train", "reader", "--data", f.res64, OUT, f.os, *TRAIN_STEPS], "64"),
    c("train-seed-negative",
      lambda f, t: ["train", "dynamics", "--kind", "object_state", "--data", f.good, OUT,
                    f"{t}/m", *TRAIN_STEPS, "--seed", "-1"], "--seed"),
    c("train-threads-0",
      lambda f, t: ["train", "dynamics", "--kind", "object_state", "--data", f.good, OUT,
                    f"{t}/m", *TRAIN_STEPS, "--threads", "0"], "--threads"),
    c("train-batch-size-0",
      lambda f, t: ["train", "dynamics", "--kind", "object_state", "--data", f.good, OUT,
                    f"{t}/m", *TRAIN_STEPS, "--batch-size", "0"], "--batch-size"),
    c("train-all-seed",
      lambda f, t: ["train", "all", "--data", f.good, OUT, f"{t}/all", "--seed", "1"],
      "one stage"),
    c("train-all-batch-size",
      lambda f, t: ["train", "all", "--data", f.good, OUT, f"{t}/all", "--batch-size", "64"],
      "one stage"),
    c("train-all-compile",
      lambda f, t: ["train", "all", "--data", f.good, OUT, f"{t}/all", "--no-compile"],
      "one stage"),
    c("train-object-state-into-latent-grid-dir",
      lambda f, t: ["train", "dynamics", "--kind", "object_state", "--data", f.good, OUT, f.tiny,
                    *TRAIN_STEPS], "latent_grid"),
    # train all
    c("train-all-steps-0",
      lambda f, t: ["train", "all", "--data", f.good, OUT, f"{t}/all", "--steps", "0"],
      "positive"),
    c("train-all-device-tpu",
      lambda f, t: ["train", "all", "--data", f.good, OUT, f"{t}/all", "--steps", "4",
                    "--device", "tpu"], "tpu"),
    c("train-all-no-image",
      lambda f, t: ["train", "all", "--data", f.noimage, OUT, f"{t}/all", "--steps", "4",
                    "--device", "cpu"], "image"),
    c("train-all-unknown-recipe",
      lambda f, t: ["train", "all", "--data", f.good, OUT, f"{t}/all", "--steps", "4",
                    "--recipe", "nope"], "nope"),
    # eval
    c("eval-fidelity-mismatched-model",
      lambda f, t: ["eval", "fidelity", "--data", f.good, "--model", f.a3, "--device", "cpu"],
      "action"),
    c("eval-fidelity-wrong-resolution",
      lambda f, t: ["eval", "fidelity", "--data", f.res64, "--model", f.tiny, "--device", "cpu"],
      "64"),
    c("eval-fidelity-episodes-0",
      lambda f, t: ["eval", "fidelity", "--data", f.good, "--model", f.tiny, "--episodes", "0",
                    "--device", "cpu"], "--episodes"),
    c("eval-fidelity-missing-weights",
      lambda f, t: ["eval", "fidelity", "--data", f.good, "--model", f.noweights, "--device",
                    "cpu"], "dynamics.safetensors"),
    c("eval-transfer-not-a-store", lambda f, t: ["eval", "transfer", f.notstore],
      "not a zarr store"),
    c("eval-transfer-unknown-env", lambda f, t: ["eval", "transfer", f.gen, "--env", "nope"],
      "nope"),
    c("eval-transfer-real-episodes", lambda f, t: ["eval", "transfer", f.good], "seeded reset"),
    c("eval-transfer-no-gt-state", lambda f, t: ["eval", "transfer", f.act3], "task_state"),
    c("eval-transfer-other-action-dim", lambda f, t: ["eval", "transfer", f.gen3], "2-D"),
    c("eval-transfer-nan-actions", lambda f, t: ["eval", "transfer", f.gen_nan], "finite"),
    c("eval-robustness-not-a-store", lambda f, t: ["eval", "robustness", f.notstore],
      "not a zarr store"),
    c("eval-robustness-other-model",
      lambda f, t: ["eval", "robustness", f.gen, "--model", f.os], "generated by"),
    c("eval-robustness-judge-missing",
      lambda f, t: ["eval", "robustness", f.gen, "--judge", f"{t}/nojudge"], "judge"),
    c("eval-ensemble-judge-latent-model",
      lambda f, t: ["eval", "ensemble", "--data", f.good, "--judge", f.tiny], "latent_grid"),
    c("eval-ensemble-not-a-store",
      lambda f, t: ["eval", "ensemble", "--data", f"{t}/none", "--judge", SHIPPED],
      "no episode store"),
    c("eval-robustness-k-0", lambda f, t: ["eval", "robustness", f.gen, "--k", "0"],
      "--robust-k"),
    # generate (every case is refused before Ray starts)
    c("generate-batch-size-0",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.tiny, "--batch-size", "0"],
      "--batch-size"),
    c("generate-success-score-looser-than-the-task",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.tiny, "--success-score", "0.9"],
      "between 0.95 and 1"),
    c("generate-robust-keep-without-only-success",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.os, "--robust-keep", "0.9"],
      "--only-success"),
    c("generate-robust-keep-latent-model",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.tiny, "--only-success",
                    "--robust-keep", "0.9"], "object_state"),
    c("generate-robust-keep-above-1",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.os, "--only-success",
                    "--robust-keep", "1.5"], "--robust-keep"),
    c("generate-robust-judge-latent-model",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.os, "--only-success",
                    "--robust-keep", "0.9", "--robust-judge", f.tiny], "latent_grid"),
    c("generate-mean-dynamics-latent-model",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.tiny, "--mean-dynamics", SHIPPED],
      "object_state"),
    c("generate-mean-dynamics-other-config",
      lambda f, t: ["generate", OUT, f"{t}/g", "--mean-dynamics", f.os], "dynamics config"),
    c("generate-device-tpu",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.tiny, "--device", "tpu"], "tpu"),
    c("generate-mismatched-model",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.a3, "--generator", "play"], "3-D"),
    c("generate-replay-wrong-resolution",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.tiny, "--generator", "replay",
                    "--source", f.res64], "64"),
    c("generate-replay-nan-actions",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.tiny, "--generator", "replay",
                    "--source", f.nan], "finite"),
    c("generate-missing-weights",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.noweights],
      "dynamics.safetensors"),
    c("generate-corrupt-weights",
      lambda f, t: ["generate", OUT, f"{t}/g", "--model", f.corrupt], "safetensors"),
    # teleop
    c("teleop-web-port-taken",
      lambda f, t: ["teleop", "--device", "web", "--headless", "--model", f.tiny, "--compute",
                    "cpu", "--port", str(f.port), OUT, f"{t}/t"], "in use"),
    c("teleop-scripted-replay-nan-actions",
      lambda f, t: [*SCRIPTED, "--generator", "replay", "--reset-from", f.nan, "--world",
                    "pusht", "--resolution", RES, OUT, f"{t}/t"], "finite"),
    c("teleop-unknown-device",
      lambda f, t: ["teleop", "--device", "tpu", "--model", f.tiny, OUT, f"{t}/t"], "tpu"),
    c("teleop-unknown-compute",
      lambda f, t: [*SCRIPTED, "--model", f.tiny, "--compute", "tpu", OUT, f"{t}/t"], "tpu"),
    c("teleop-mismatched-model",
      lambda f, t: [*SCRIPTED, "--model", f.a3, "--compute", "cpu", OUT, f"{t}/t"], "3-D"),
    c("teleop-corrupt-weights",
      lambda f, t: [*SCRIPTED, "--model", f.corrupt, "--compute", "cpu", OUT, f"{t}/t"],
      "safetensors"),
    c("teleop-episodes-0",
      lambda f, t: [*SCRIPTED[:-4], "--episodes", "0", "--model", f.tiny, OUT, f"{t}/t"],
      "episodes"),
    c("teleop-append-other-resolution",
      lambda f, t: [*SCRIPTED, "--world", "pusht", "--resolution", "64", OUT, f.good],
      "different schema"),
    # export lerobot / import lerobot
    c("export-truncated-store",
      lambda f, t: ["export", "lerobot", f.truncated, f"{t}/ds", "--repo-id", "local/x"],
      "corrupt"),
    c("export-unknown-obs",
      lambda f, t: ["export", "lerobot", f.good, f"{t}/ds", "--repo-id", "local/x", "--obs",
                    "nope"], "nope"),
    c("export-pixels-without-image",
      lambda f, t: ["export", "lerobot", f.noimage, f"{t}/ds", "--repo-id", "local/x", "--obs",
                    "pixels_agent_pos"], "image"),
    c("export-unknown-vcodec",
      lambda f, t: ["export", "lerobot", f.good, f"{t}/ds", "--repo-id", "local/x", "--vcodec",
                    "nope"], "nope"),
    c("import-not-a-dataset", lambda f, t: ["import", "lerobot", f.notstore, f"{t}/s"], "info"),
    c("import-missing-dataset",
      lambda f, t: ["import", "lerobot", f"{t}/missing", f"{t}/s"], "missing"),
    c("import-state-only-dataset", lambda f, t: ["import", "lerobot", f.ds, f"{t}/s"],
      "no RGB camera"),
    # model pack
    c("model-pack-missing-weights",
      lambda f, t: ["model", "pack", f"{t}/m", "--from", f.noweights], "dynamics.safetensors"),
    c("model-pack-corrupt-weights",
      lambda f, t: ["model", "pack", f"{t}/m", "--from", f.corrupt], "safetensors"),
    c("model-pack-unknown-part",
      lambda f, t: ["model", "pack", f"{t}/m", "--part", f"nope={f.tiny}"], "nope"),
    c("model-pack-mixed-kinds",
      lambda f, t: ["model", "pack", f"{t}/m", "--part", f"dynamics={f.os}", "--part",
                    f"autoencoder={f.tiny}"], "object_state"),
    c("model-pack-not-a-model",
      lambda f, t: ["model", "pack", f"{t}/m", "--from", f.notstore], "config.json"),
    # demo
    c("demo-episodes-0",
      lambda f, t: ["demo", OUT, f"{t}/d", "--model", f.tiny, "--episodes", "0"], "--episodes"),
    c("demo-mismatched-model", lambda f, t: ["demo", OUT, f"{t}/d", "--model", f.a3], "3-D"),
    c("demo-missing-model",
      lambda f, t: ["demo", OUT, f"{t}/d", "--model", f"{t}/missing"], "missing"),
    # view
    c("view-not-a-store",
      lambda f, t: ["view", f.notstore, "--port", "0"], "not a zarr store"),
    c("view-truncated-store", lambda f, t: ["view", f.truncated, "--port", "0"], "corrupt"),
    c("view-port-taken", lambda f, t: ["view", f.good, "--port", str(f.port)], "already in use"),
    # policy train
    c("policy-train-batch-size-0",
      lambda f, t: ["policy", "train", f.ds, f"{t}/run", "--repo-id", "local/bad",
                    "--batch-size", "0"], "batch size"),
    c("policy-train-steps-0",
      lambda f, t: ["policy", "train", f.ds, f"{t}/run", "--repo-id", "local/bad", "--steps",
                    "0"], "steps"),
    c("policy-train-not-a-dataset",
      lambda f, t: ["policy", "train", f.notstore, f"{t}/run", "--repo-id", "local/bad"],
      "info.json"),
    c("policy-train-unknown-policy",
      lambda f, t: ["policy", "train", f.ds, f"{t}/run", "--repo-id", "local/bad", "--policy",
                    "nope", "--steps", "1"], "nope"),
    c("policy-train-device-tpu",
      lambda f, t: ["policy", "train", f.ds, f"{t}/run", "--repo-id", "local/bad", "--device",
                    "tpu", "--steps", "1"], "tpu"),
    # bench
    c("bench-rollout-steps-0",
      lambda f, t: ["bench", "rollout", "--model", f.tiny, "--device", "cpu", "--steps", "0"],
      "--steps"),
]
# fmt: on


def assert_refused(code: int, stdout: str, stderr: str, needle: str) -> None:
    """Exit status 2, nothing on stdout, one line on stderr holding ``needle``."""
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert code == 2, f"exit {code}: {stderr[-3000:]}"
    assert len(lines) == 1, stderr
    assert stdout == "", stdout
    assert needle in lines[0], lines[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_cleanly(case: Case, fx: Inputs, tmp_path: Path) -> None:
    args = case.args(fx, tmp_path)
    before = tree_hash(fx.base), tree_hash(tmp_path)
    result = runner.invoke(app, args)
    if result.exit_code not in (0, 2) and result.exc_info is not None:
        exc = result.exc_info[1]
        pytest.fail(f"{type(exc).__name__}: {exc} ({result.stderr[-2000:]})")
    assert_refused(result.exit_code, result.stdout, result.stderr, case.needle)
    assert (tree_hash(fx.base), tree_hash(tmp_path)) == before, "a store or an output changed"


PLUGIN_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
PLUGIN_CASES = [
    pytest.param(
        lambda f, t: [
            str(BIN / "lerobot-eval"),
            "--policy.type=act",
            "--policy.device=cpu",
            "--env.type=demofactory",
            f"--env.model={f.corrupt}",
            "--env.device=cpu",
            f"--output_dir={t}/eval",
        ],
        "safetensors",
        id="lerobot-eval-corrupt-weights",
    ),
    pytest.param(
        lambda f, t: [
            str(BIN / "lerobot-record"),
            "--robot.type=demofactory",
            f"--robot.model={f.tiny}",
            "--robot.device=tpu",
            "--teleop.type=keyboard",
            "--dataset.repo_id=local/rec",
            f"--dataset.root={t}/rec",
            "--dataset.single_task=push the T",
            "--dataset.num_episodes=1",
            "--dataset.push_to_hub=false",
        ],
        "tpu",
        id="lerobot-record-device-tpu",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "needle"), PLUGIN_CASES)
def test_plugin_bad_input_is_refused_cleanly(
    args: Args, needle: str, fx: Inputs, tmp_path: Path
) -> None:
    """The plugins run inside lerobot's own CLIs, as subprocesses (about 20 s each). Those
    log their own INFO lines (the parsed config) on stderr first; the plugin's refusal is
    one line after them, and the last."""
    cmd = args(fx, tmp_path)
    before = tree_hash(fx.base), tree_hash(tmp_path)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=PLUGIN_ENV, timeout=300)
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text, proc.stderr[-3000:]
    assert proc.returncode == 2, proc.stderr[-3000:]
    ours = [line for line in text.splitlines() if line.startswith("demofactory:")]
    assert len(ours) == 1, text[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == ours[0], proc.stderr[-3000:]
    assert needle in ours[0], ours[0]
    assert (tree_hash(fx.base), tree_hash(tmp_path)) == before, "a store or an output changed"
