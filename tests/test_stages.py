"""The resumable stage run (``factory.stages``): skip what is done, resume what was
running from its record, add up the wall time of every attempt, refuse a foreign file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from factory.stages import StageFileError, StageRun


class Boom(RuntimeError):
    pass


def test_a_rerun_skips_done_stages_and_resumes_the_interrupted_one(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    calls: list[str] = []

    def first(rec: dict[str, Any]) -> dict[str, Any]:
        calls.append("first")
        return {"info": 1}

    def second(rec: dict[str, Any]) -> dict[str, Any]:
        calls.append(f"second resume={rec.get('budget')}")
        if "budget" not in rec:
            rec["budget"] = 7  # what a resumed attempt needs (saved with the attempt's time)
            raise Boom
        return {"steps": rec["budget"] * 2}

    run = StageRun(path, {"format": "test"})
    assert run.run("a", first)
    with pytest.raises(Boom):
        run.run("b", second)
    on_disk = json.loads(path.read_text())
    assert on_disk["format"] == "test"
    assert on_disk["stages"]["a"]["status"] == "done" and on_disk["stages"]["a"]["info"] == 1
    assert on_disk["stages"]["b"]["status"] == "running" and on_disk["stages"]["b"]["budget"] == 7

    again = StageRun.load(path)
    assert not again.run("a", first)  # done: skipped
    assert again.run("b", second)
    assert calls == ["first", "second resume=None", "second resume=7"]
    b = StageRun.load(path).stage("b")
    assert b["status"] == "done" and b["steps"] == 14 and b["budget"] == 7
    assert again.done("a") and again.done("b") and not again.done("c")


def test_wall_time_adds_up_every_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 12.5, 20.0, 21.0, 30.0, 30.25])
    monkeypatch.setattr("factory.stages.time.monotonic", lambda: next(clock))
    run = StageRun(tmp_path / "run.json", {})

    def fail(rec: dict[str, Any]) -> None:
        raise Boom

    with pytest.raises(Boom):
        run.run("s", fail)  # 2.5 s, interrupted
    assert run.run("s", lambda rec: None)  # 1.0 s more, done
    assert run.stage("s")["wall_s"] == pytest.approx(3.5)
    assert run.spent_s() == pytest.approx(3.5)
    assert run.run("s", lambda rec: {"info": "again"}, again=True)  # rerun on request
    assert run.stage("s")["wall_s"] == pytest.approx(3.75) and run.stage("s")["info"] == "again"
    run.stage("t")["wall_s"] = 100.0  # a stage not done does not count as spent
    assert run.spent_s() == pytest.approx(3.75)


@pytest.mark.parametrize("text", [None, "{not json", "[1, 2]", '{"config": {}}'])
def test_a_file_that_holds_no_stage_run_is_refused(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "run.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(StageFileError):
        StageRun.load(path)


def test_a_partial_write_never_replaces_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    run = StageRun(path, {"n": 1})
    run.save()
    run.state["n"] = 2

    def broken(self: Path, text: str) -> None:
        Path.write_bytes(self, text[:5].encode())
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", broken)
    with pytest.raises(OSError):
        run.save()
    monkeypatch.undo()
    assert StageRun.load(path).state["n"] == 1
