"""``bench/zero_real_data.py``'s plan and work directory: the state arm's schedule per
dataset size, and what a rerun with other settings keeps, redoes or refuses."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import zero_real_data as zrd
from zero_real_markdown import BEGIN, END, markdown, splice
from zero_real_policies import CANDIDATES, state_policy
from zero_real_run import Run, StageError, threads_per_job


def plan(work: Path, *extra: str) -> zrd.Plan:
    return zrd.parse(["--work", str(work), *extra])[0]


def test_state_schedule_keeps_the_epochs_and_the_checkpoint_fractions(tmp_path: Path) -> None:
    p = plan(tmp_path, "--state-steps", "12000", "--state-saves", "0.25,0.5")
    assert p.state_schedule("R100") == (12000, [3000, 6000, 12000])
    assert p.state_schedule("G30") == (3600, [900, 1800, 3600])
    assert p.state_schedule("M100") == (12000, [3000, 6000, 12000])
    assert p.state_schedule("R10") == (1200, [300, 600, 1200])


def test_default_state_policy_is_a_selection_candidate(tmp_path: Path) -> None:
    p = plan(tmp_path)
    assert p.state_policy in CANDIDATES
    assert p.config()["state_candidate"] == state_policy(p.state_policy).record()
    with pytest.raises(ValueError, match="--state-policy must be one of"):
        plan(tmp_path, "--state-policy", "nope")


def test_g_success_score_is_a_shared_setting_only_when_given(tmp_path: Path) -> None:
    """The default run keeps G with a margin (0.97); the smoke run uses the task's own
    rule, and then the config holds no key (work dirs made before the option keep their
    config); a looser score is refused."""
    assert plan(tmp_path).config()["g_success_score"] == 0.97
    assert plan(tmp_path, "--g-success-score", "0.98").config()["g_success_score"] == 0.98
    assert "g_success_score" not in plan(tmp_path, "--tiny").config()
    with pytest.raises(ValueError, match=r"between 0\.95 and 1"):
        plan(tmp_path, "--g-success-score", "0.9")


def test_g_robust_keep_is_a_setting_only_when_given(tmp_path: Path) -> None:
    """G's robustness rule reaches ``generate --robust-keep`` and the config only when
    given (the default run's work dirs keep their config); outside 0..1 it is refused."""
    assert "g_robust_keep" not in plan(tmp_path).config()
    p = plan(tmp_path, "--g-robust-keep", "0.9")
    assert p.config()["g_robust_keep"] == 0.9
    with pytest.raises(ValueError, match="--g-robust-keep"):
        plan(tmp_path, "--g-robust-keep", "1.5")


def test_g_robust_judges_need_the_rule_and_model_dirs(tmp_path: Path) -> None:
    """Judges enter the config (as absolute paths) only when given, only with the keep
    rule, and only as model directories."""
    assert "g_robust_judges" not in plan(tmp_path, "--g-robust-keep", "0.9").config()
    judge = tmp_path / "j1"
    judge.mkdir()
    (judge / "config.json").write_text("{}")
    p = plan(tmp_path, "--g-robust-keep", "0.9", "--g-robust-judges", str(judge))
    assert p.config()["g_robust_judges"] == [str(judge.resolve())]
    with pytest.raises(ValueError, match="goes with --g-robust-keep"):
        plan(tmp_path, "--g-robust-judges", str(judge))
    with pytest.raises(ValueError, match="not a model directory"):
        plan(tmp_path, "--g-robust-keep", "0.9", "--g-robust-judges", str(tmp_path / "none"))


def test_g_hands_the_robustness_rule_and_its_judges_to_generate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage G's ``factory generate`` carries ``--robust-keep`` and one ``--robust-judge``
    per judge, and neither without the rule."""
    from types import SimpleNamespace

    import zero_real_demos

    seen: list[list[str]] = []
    monkeypatch.setattr(zero_real_demos, "_rounds", lambda *a: seen.append(a[4]) or {})
    judges = [tmp_path / "j1", tmp_path / "j2"]
    for judge in judges:
        judge.mkdir()
        (judge / "config.json").write_text("{}")
    p = plan(tmp_path, "--g-robust-keep", "0.9", "--g-robust-judges", *map(str, judges))
    zero_real_demos.stage_g(SimpleNamespace(plan=p, note=lambda _: None))
    zero_real_demos.stage_g(SimpleNamespace(plan=plan(tmp_path / "w"), note=lambda _: None))
    with_rule, without = seen
    assert with_rule[with_rule.index("--robust-keep") + 1] == "0.9"
    given = [with_rule[i + 1] for i, a in enumerate(with_rule) if a == "--robust-judge"]
    assert given == [str(j.resolve()) for j in judges]
    assert "--robust-keep" not in without and "--robust-judge" not in without


def _old_run(tmp_path: Path) -> Path:
    """A work dir whose state arm finished with ``act128`` and whose image arm finished."""
    work = tmp_path / "w"
    run = Run(plan(work, "--state-policy", "act128"))
    for stage in ("R", "export_state", "train_state", "eval_state", "train_image"):
        run.stage(stage).update(status="done", wall_s=1.0)
    run.state["commands"] = [
        {"stage": "train_state", "cmd": "old state", "rc": 0, "wall_s": 1.0},
        {"stage": "train_image", "cmd": "image", "rc": 0, "wall_s": 1.0},
    ]
    run.save()
    for sub in ("train/state/R100", "eval/state/R100", "train/image/R100", "lerobot/state"):
        (work / sub).mkdir(parents=True)
    ahead = {"config": run.state["config"], "stages": {}, "commands": [
        {"stage": "eval_state", "cmd": "ahead", "rc": 0, "wall_s": 1.0}]}  # fmt: skip
    (work / "eval_ahead.json").write_text(json.dumps(ahead))
    return work


def test_a_changed_arm_is_refused_unless_restarted(tmp_path: Path) -> None:
    work = _old_run(tmp_path)
    with pytest.raises(ValueError, match="--restart-arm state"):
        Run(plan(work))
    with pytest.raises(
        ValueError, match=r"other settings \(episodes, eval_seeds\); use a new --work"
    ):
        Run(plan(work, "--state-policy", "act128", "--episodes", "7"), restart=("state",))
    assert (work / "train" / "state" / "R100").is_dir()  # refused: nothing moved


def test_restarting_an_arm_keeps_the_rest(tmp_path: Path) -> None:
    work = _old_run(tmp_path)
    run = Run(plan(work), restart=("state",))
    assert not run.done("train_state") and not run.done("eval_state")
    assert run.done("R") and run.done("export_state") and run.done("train_image")
    old = work / "superseded" / "state-0"
    assert (old / "train" / "R100").is_dir() and (old / "eval" / "R100").is_dir()
    assert not (work / "train" / "state").exists() and (work / "train" / "image").is_dir()
    assert (work / "lerobot" / "state").is_dir()
    marked = {c["cmd"]: c.get("superseded") for c in run.state["commands"]}
    assert marked == {"old state": str(old), "image": None}
    (record,) = run.state["superseded"]
    assert record["config"]["state_policy"] == "act128" and "train_state" in record["stages"]
    ahead = json.loads((work / "eval_ahead.json").read_text())
    assert ahead["commands"][0]["superseded"] == str(old)
    assert Run(plan(work)).state["config"] == plan(work).config()  # the rerun resumes


def test_partial_report_has_the_scores_so_far_and_no_targets(tmp_path: Path) -> None:
    """``--eval-ahead``'s report of an unfinished run: the scores that exist, the stages
    still to run, and no targets (they are the whole default run's)."""
    work = tmp_path / "w"
    p = plan(work)
    run = Run(p)
    for stage in ("R", "G", "transfer", "null", "M", "export_state"):
        run.stage(stage).update(status="done", wall_s=1.0)
    run.save()
    scores = {(5500, "real"): 20.0, (5500, "model"): 24.0, (11000, "real"): 60.0,
              (11000, "model"): 66.0}  # fmt: skip
    for (step, world), pc in scores.items():
        f = work / "eval" / "state" / "R100" / str(step) / world / "eval_info.json"
        f.parent.mkdir(parents=True)
        overall = {"pc_success": pc, "avg_max_reward": pc / 100 + 0.1, "n_episodes": 50}
        f.write_text(json.dumps({"overall": overall}))
    assert zrd.eval_ahead(p, ("state",)) == 0  # no checkpoints to score: only the report
    res = json.loads((work / "partial.json").read_text())
    assert res["partial"]["stages_to_run"][:2] == ["train_state", "eval_state"]
    assert "report" in res["partial"]["stages_to_run"] and res["targets"] == {}
    state = res["arms"]["state"]
    assert state["real_success"] == {"R": 0.6, "G": None, "M": None}
    assert state["model_success"]["R"] == 0.66 and state["agreement"]["n_checkpoints"] == 2
    text = markdown(res)
    assert "**Partial: an unfinished run**" in text and "target (default run)" not in text
    assert (work / "partial.png").is_file()


def _doc(body: str) -> str:
    return f"# Results\n\nprose above\n\n{BEGIN}\n{body}\n{END}\n\nprose below\n"


def test_splice_replaces_only_the_tables_between_the_markers() -> None:
    doc = _doc("| old | table |")
    new = splice(doc, "### The state arm\n\n| new |\n")
    assert "| old |" not in new and "| new |" in new
    assert new.startswith("# Results\n\nprose above\n\n" + BEGIN)
    assert new.endswith(END + "\n\nprose below\n")
    assert splice(new, "### The state arm\n\n| new |\n") == new  # a rerun changes nothing


@pytest.mark.parametrize("doc", ["no markers at all\n", f"{END}\n{BEGIN}\n", _doc("x") + _doc("y")])
def test_splice_refuses_a_document_without_one_ordered_pair_of_markers(doc: str) -> None:
    with pytest.raises(ValueError, match="needs one"):
        splice(doc, "| t |\n")


def test_the_report_stage_writes_the_tables_into_the_results_document(tmp_path: Path) -> None:
    """The default run regenerates RESULTS.md's tables from the JSON it writes; a document
    without the markers is left as it was."""
    work, md, bare = tmp_path / "w", tmp_path / "RESULTS.md", tmp_path / "BARE.md"
    md.write_text(_doc("stale"))
    bare.write_text("no markers\n")
    out = tmp_path / "res.json"
    p, a = zrd.parse(["--work", str(work), "--out", str(out), "--results-md", str(md)])
    assert a.results_md == str(md)
    run = Run(p)
    files = zrd.stage_report(out, str(md))(run)
    text = md.read_text()
    assert files["tables"] == str(md) and "stale" not in text
    assert "| stage | wall time (s) |" in text and text.endswith(END + "\n\nprose below\n")
    assert markdown(json.loads(out.read_text())) in text
    zrd.stage_report(out, str(bare))(run)
    assert bare.read_text() == "no markers\n"


def test_results_md_defaults_to_none_for_another_out_and_refuses_a_missing_file(
    tmp_path: Path,
) -> None:
    work = tmp_path / "w"
    assert zrd.parse(["--work", str(work), "--out", str(tmp_path / "r.json")])[1].results_md == ""
    assert zrd.parse(["--work", str(work)])[1].results_md.endswith("docs/RESULTS.md")
    with pytest.raises(ValueError, match="no such file"):
        zrd.parse(["--work", str(work), "--results-md", str(tmp_path / "missing.md")])


CHILD = (
    "import json, os, sys, time\n"
    "t0 = time.time(); time.sleep(0.4)\n"
    "open(sys.argv[1], 'w').write(f'{t0} {time.time()}')\n"
    "print(json.dumps({'i': int(sys.argv[2]), 'omp': os.environ.get('OMP_NUM_THREADS')}))\n"
    "sys.exit(int(sys.argv[3]))\n"
)


def _children(tmp: Path, codes: list[int]) -> list[list[str]]:
    return [
        ["-c", CHILD, str(tmp / f"t{i}"), str(i), str(c), "--json"] for i, c in enumerate(codes)
    ]


def _spans(tmp: Path, n: int) -> list[tuple[float, float]]:
    return [tuple(map(float, (tmp / f"t{i}").read_text().split())) for i in range(n)]  # type: ignore[misc]


def test_cmds_run_jobs_at_a_time_with_their_share_of_threads_in_order(tmp_path: Path) -> None:
    """``--jobs 2``: two of three commands overlap, never three; outputs come back in the
    order given; each command is logged once, under its own log file."""
    run = Run(plan(tmp_path / "w"), jobs=2)
    done: list[int] = []
    out = run.cmds(
        "t", "python", _children(tmp_path, [0, 0, 0]), on_done=lambda i, _: done.append(i)
    )
    assert [o["i"] for o in out] == [0, 1, 2] and sorted(done) == [0, 1, 2]
    assert {o["omp"] for o in out} == {str(threads_per_job(2))}
    spans = _spans(tmp_path, 3)
    at_once = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert at_once == 2
    logs = [c["log"] for c in run.state["commands"]]
    assert len(set(logs)) == 3 and all(c["rc"] == 0 for c in run.state["commands"])
    assert not list((tmp_path / "w" / "logs").glob("*.stdout"))  # stdout moved into the log


def test_cmds_one_job_runs_them_in_turn_with_the_threads_it_was_given(tmp_path: Path) -> None:
    run = Run(plan(tmp_path / "w"))
    out = run.cmds("t", "python", _children(tmp_path, [0, 0]))
    first, second = _spans(tmp_path, 2)
    assert first[1] <= second[0] and out[0]["omp"] == os.environ.get("OMP_NUM_THREADS")


def test_a_failed_command_lets_the_others_end_then_fails_the_stage(tmp_path: Path) -> None:
    run = Run(plan(tmp_path / "w"), jobs=2)
    done: list[int] = []
    with pytest.raises(StageError, match="exit 3"):
        run.cmds("t", "python", _children(tmp_path, [3, 0, 0]), on_done=lambda i, _: done.append(i))
    assert sorted(done) == [1, 2]  # the others ran to the end and were recorded
    assert sorted(c["rc"] for c in run.state["commands"]) == [0, 0, 3]


def test_jobs_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--jobs"):
        zrd.parse(["--work", str(tmp_path / "w"), "--jobs", "0"])


def test_an_interrupt_kills_the_commands_still_running(tmp_path: Path) -> None:
    run = Run(plan(tmp_path / "w"), jobs=2)
    pid_file = tmp_path / "pid"
    slow = ["-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
            "time.sleep(60)", str(pid_file)]  # fmt: skip

    def interrupt(i: int, _: object) -> None:
        for _ in range(200):  # until the slow one has started
            if pid_file.is_file() and pid_file.read_text():
                break
            time.sleep(0.05)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run.cmds("t", "python", [["-c", "pass"], slow], on_done=interrupt)
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(int(pid_file.read_text()), 0)
