"""A resumable run of named stages, recorded in one JSON file.

The file holds the caller's own fields (its config, a format name) and ``stages``::

    {"stages": {name: {"status": "running" | "done", "wall_s": float, ...}}, ...}

It is rewritten atomically after every change. :meth:`StageRun.run` skips a finished
stage; a stage found ``running`` was interrupted, and its function finds the stage's
record as it was left (whatever it wrote there before, e.g. a budget) to resume from.
``wall_s`` adds up the seconds of every attempt, interrupted ones included. Both
``factory train all`` (``train_all.json``) and ``bench/zero_real_data.py``
(``state.json``) keep their runs this way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

StageFn = Callable[[dict[str, Any]], dict[str, Any] | None]
"""A stage: gets its record (to read and add to), returns fields to add when done."""


class StageFileError(ValueError):
    """The file is no readable stage run."""


class StageRun:
    """The stages of one run and their records, kept in ``path``.

    ``state`` is the whole JSON object; a new run's is the caller's header plus an empty
    ``stages``. Nothing is written until :meth:`save` or :meth:`run`.
    """

    def __init__(self, path: Path, state: dict[str, Any]) -> None:
        self.path = path
        self.state = state
        self.state.setdefault("stages", {})

    @classmethod
    def load(cls, path: Path) -> StageRun:
        """The run recorded in ``path``; :class:`StageFileError` when it holds none."""
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise StageFileError(f"{path}: no readable stage run ({err})") from None
        if not isinstance(state, dict) or not isinstance(state.get("stages"), dict):
            raise StageFileError(f"{path}: no stage run (no 'stages' object)")
        return cls(path, state)

    @property
    def stages(self) -> dict[str, dict[str, Any]]:
        stages: dict[str, dict[str, Any]] = self.state["stages"]
        return stages

    def stage(self, name: str) -> dict[str, Any]:
        """Stage ``name``'s record (created empty)."""
        return self.stages.setdefault(name, {})

    def done(self, name: str) -> bool:
        return self.stages.get(name, {}).get("status") == "done"

    def spent_s(self) -> float:
        """Seconds spent in the finished stages."""
        return sum(
            float(r.get("wall_s", 0.0)) for r in self.stages.values() if r.get("status") == "done"
        )

    def save(self) -> None:
        """Write the file atomically (a partial write never replaces it)."""
        tmp = self.path.with_name(self.path.name + ".partial")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.path)

    def run(self, name: str, fn: StageFn, *, again: bool = False) -> bool:
        """Run stage ``name`` unless it is done (``again``: run it anyway); False when
        skipped. The stage is recorded ``running`` before ``fn`` starts, its wall time
        after each attempt (even a failed one), and ``done`` with ``fn``'s fields after."""
        rec = self.stage(name)
        if rec.get("status") == "done" and not again:
            log.info("stage %s: done before, skipped", name)
            return False
        log.info("stage %s ...", name)
        rec["status"] = "running"
        self.save()
        t0 = time.monotonic()
        try:
            outcome = fn(rec)
        finally:
            rec["wall_s"] = round(float(rec.get("wall_s", 0.0)) + time.monotonic() - t0, 3)
            self.save()
        rec.update(outcome or {})
        rec["status"] = "done"
        self.save()
        return True
