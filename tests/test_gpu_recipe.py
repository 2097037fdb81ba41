"""The offline GPU recipe end to end on this CPU, at a 1-minute budget, in a clean virtual
environment holding only torch, numpy, what the GPU machine already has (DESIGN §5; linked
in from this environment) and the wheelhouse: no ray, no lerobot, nothing else from the
project's lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
GPU_MACHINE_HAS = (
    "torch",
    "numpy",
    "safetensors",
    "typer",
    "rich",
    "opencv-python-headless",
    "pyyaml",
    "cloudpickle",
    "packaging",
    "typing-extensions",
)
QUICK = {  # a small store and a short evaluation: the budget is what is under test
    "PLAY_EPISODES": "6",
    "PLAY_STEPS": "60",
    "EXPERT_EPISODES": "2",
    "EXPERT_STEPS": "60",
    "HELD_PLAY": "2",
    "HELD_STEPS": "120",
    "HELD_EXPERT": "0",
    "EVAL_EPISODES": "2",
    "STABILITY_FRAMES": "100",
    "WORKERS": "2",
    "DEVICE": "cpu",
}


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need, transitively (no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        dist = metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for req in map(Requirement, dist.requires or []):
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _linked_site(names: tuple[str, ...], target: Path) -> Path:
    """A folder of links to just ``names`` (and their needs) in this environment."""
    target.mkdir()
    for dist in _closure(names):
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            src = Path(str(dist.locate_file(top)))
            if src.exists() and not (target / top).exists() and not top.endswith(".pth"):
                (target / top).symlink_to(src)
    return target


def _sh(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


PILE_QUICK = {**QUICK, "PLAY_EPISODES": "4", "HELD_PLAY": "2", "ENV": "pile"}


def _clean_venv(tmp_path: Path) -> tuple[Path, Path]:
    """(the wheelhouse, the python of a venv holding only what the GPU machine has)."""
    wheelhouse = REPO / ".wheelhouse"
    if not any(wheelhouse.glob("*.whl")):
        wheelhouse = tmp_path / "wheelhouse"
        _sh([str(REPO / "scripts" / "wheelhouse.sh"), str(wheelhouse)])
    size = sum(f.stat().st_size for f in wheelhouse.glob("*.whl"))
    assert size < 40 * 2**20, size
    venv = tmp_path / "venv"
    _sh([sys.executable, "-m", "venv", str(venv)])  # with pip (ensurepip), for the recipe
    python = venv / "bin" / "python"
    site = _sh([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    linked = _linked_site(GPU_MACHINE_HAS, tmp_path / "gpu_machine_site")
    (Path(site.stdout.strip()) / "gpu_machine.pth").write_text(f"{linked}\n")
    blocked = subprocess.run([str(python), "-c", "import ray"], capture_output=True)
    assert blocked.returncode != 0
    return wheelhouse, python


def _recipe(tmp_path: Path, sizes: dict[str, str]) -> Path:
    """Run scripts/gpu_train.sh at a 1-minute budget in the clean venv; its OUT folder."""
    wheelhouse, python = _clean_venv(tmp_path)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(sizes, PYTHON=str(python), WHEELHOUSE=str(wheelhouse), WORK=str(tmp_path / "w"))
    _sh(["bash", str(REPO / "scripts" / "gpu_train.sh"), str(out), "1"], env=env, cwd=REPO)
    return out


def _small(out: Path) -> None:
    """What comes back through the device's $OUT: at most 8 files, each under 16 MiB."""
    files = [f for f in out.rglob("*") if f.is_file()]
    assert len(files) <= 8 and max(f.stat().st_size for f in files) < 16 * 2**20


def _small_and_done(out: Path) -> None:
    """A few small files, and the log's end."""
    _small(out)
    assert "done" in (out / "train.log").read_text()


@pytest.mark.slow
def test_gpu_recipe_on_cpu_in_a_clean_venv(tmp_path: Path) -> None:
    out = _recipe(tmp_path, QUICK)
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["device"] == "cpu" and summary["budget"]["minutes"] == 1
    # the budget bounds the optimisation loops; each stage's set-up and held-out metrics
    # come on top (about as long again at 1 minute on this CPU, small on a GPU)
    assert sum(s["wall_s"] for s in summary["stages"].values()) < 3 * 60
    assert {"recon_psnr", "h10_psnr"} <= set(summary["fidelity"])
    assert "horizons" in json.loads((out / "fidelity.json").read_text())
    # the recipe trains the shipped kind, object_state: dynamics, reader and renderer
    assert json.loads((out / "model" / "config.json").read_text())["kind"] == "object_state"
    assert sorted(f.name for f in (out / "model").iterdir()) == [
        "config.json",
        "dynamics.safetensors",
        "provenance.json",
        "reader.safetensors",
        "renderer.safetensors",
    ]
    _small_and_done(out)


@pytest.mark.slow
def test_gpu_recipe_trains_the_pile_model_with_env_pile(tmp_path: Path) -> None:
    out = _recipe(tmp_path, PILE_QUICK)
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["device"] == "cpu" and summary["budget"]["minutes"] == 1
    # the pile's shipped kind, with both cameras, scored by the pile's fidelity metrics
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["kind"] == "object_set"
    assert {"h10_disc_iou_top", "h10_disc_iou_side"} <= set(summary["fidelity"])
    _small_and_done(out)


def test_gpu_recipe_refuses_an_unknown_env_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "ENV": "rope"}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_train.sh"), str(out), "1"],
        env=env, capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "gpu_train: ENV is pusht or pile, not rope"
    ]
    assert not out.exists()


ARMS_QUICK = {"PLAY_EPISODES": "4", "PLAY_STEPS": "40", "WORKERS": "2", "DEVICE": "cpu"}


@pytest.mark.slow
def test_dynamics_arms_train_side_by_side_in_a_clean_venv(tmp_path: Path) -> None:
    """scripts/gpu_dynamics_arms.sh: every arm its own process, its batch and --set
    applied, one tar per arm coming back, and the store's digest in the log."""
    wheelhouse, python = _clean_venv(tmp_path)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(ARMS_QUICK, PYTHON=str(python), WHEELHOUSE=str(wheelhouse), WORK=str(tmp_path / "w"))
    arms = ["small:32", "wide:16:dynamics.hidden=16,dynamics.message_steps=1"]
    _sh(["bash", str(REPO / "scripts" / "gpu_dynamics_arms.sh"), str(out), "0.1", *arms],
        env=env, cwd=REPO)  # fmt: skip
    assert sorted(f.name for f in out.iterdir()) == ["arms.log", "small.tar", "wide.tar"]
    log = (out / "arms.log").read_text()
    assert '"episodes": 4' in log and "task_state" in log and "done" in log
    import tarfile

    for name, hidden, steps in (("small", 64, 1), ("wide", 16, 1)):
        with tarfile.open(out / f"{name}.tar") as tar:
            assert f"{name}/dynamics.safetensors" in tar.getnames()
            config = json.load(tar.extractfile(f"{name}/config.json"))  # type: ignore[arg-type]
            metrics = json.load(tar.extractfile(f"{name}.json"))  # type: ignore[arg-type]
        assert config["dynamics"]["hidden"] == hidden and metrics["step"] >= steps
    _small(out)
    first = json.loads(_member(out / "wide.tar", "wide.json"))["step"]
    # RESUME=1 continues an arm in WORK to the new total, its config kept
    again = tmp_path / "again"
    _sh(["bash", str(REPO / "scripts" / "gpu_dynamics_arms.sh"), str(again), "0.2", arms[1]],
        env={**env, "RESUME": "1"}, cwd=REPO)  # fmt: skip
    resumed = json.loads(_member(again / "wide.tar", "wide.json"))
    assert resumed["step"] > first and resumed["elapsed_s"] >= 0.2 * 60
    assert json.loads(_member(again / "wide.tar", "wide/config.json"))["dynamics"]["hidden"] == 16


def _member(tar_path: Path, name: str) -> bytes:
    import tarfile

    with tarfile.open(tar_path) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read()


def test_dynamics_arms_refuse_a_malformed_arm_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_dynamics_arms.sh"), str(out), "1", "wide:lots"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "gpu_dynamics_arms: an ARM is NAME:BATCH[:SETS], not wide:lots"
    ]
    assert not out.exists()


def test_dynamics_arms_refuse_to_resume_an_arm_that_is_not_there(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "RESUME": "1", "WORK": str(tmp_path / "w")}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_dynamics_arms.sh"), str(out), "1", "wide:16"],
        capture_output=True, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"gpu_dynamics_arms: RESUME=1 but {tmp_path / 'w' / 'arms' / 'wide'} holds no arm"
    ]
    assert not out.exists()
