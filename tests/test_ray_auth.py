"""Ray clusters started by ``factory generate`` / ``factory demo`` keep token auth on,
with an owner-only token file and without Ray's notice (which advises turning it off)."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines.ray_auth import (
    AUTH_NOTICE,
    RAY_AUTH_LOGGER,
    prepare_local_start,
    private_token_file,
    quiet_auth_notice,
)

ROOT = Path(__file__).resolve().parents[1]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_token_file_is_owner_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / ".ray" / "auth_token"
    private_token_file(path)
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0  # 256 bits, hex, as Ray makes them
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    private_token_file(path)
    assert path.read_text() == token  # an existing token is kept
    path.chmod(0o644)
    private_token_file(path)
    assert "readable by other users" in caplog.text and _mode(path) == 0o644


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_only_the_auth_notice_is_dropped() -> None:
    quiet_auth_notice()
    quiet_auth_notice()
    logger = logging.getLogger(RAY_AUTH_LOGGER)
    seen = _Records()
    logger.addHandler(seen)  # Ray's own logger may not propagate to the root
    try:
        logger.warning("%s. Set RAY_AUTH_MODE=disabled to opt out.", AUTH_NOTICE)
        logger.warning("Token authentication is disabled for this Ray cluster.")
    finally:
        logger.removeHandler(seen)
    assert seen.messages == ["Token authentication is disabled for this Ray cluster."]
    assert len(logger.filters) == 1


def test_local_start_keeps_auth_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    prepare_local_start()
    assert "without token authentication" in caplog.text
    assert not (tmp_path / ".ray").exists() and os.environ["RAY_AUTH_MODE"] == "disabled"
    monkeypatch.delenv("RAY_AUTH_MODE")
    prepare_local_start()
    assert _mode(tmp_path / ".ray" / "auth_token") == 0o600
    assert "RAY_AUTH_MODE" not in os.environ  # never set here: Ray turns token mode on


START = textwrap.dedent(
    """
    import json, os, ray
    from pipelines.generate_ray import connect
    assert connect(None)
    print(json.dumps({"mode": os.environ.get("RAY_AUTH_MODE"),
                      "gcs": ray.get_runtime_context().gcs_address}))
    ray.shutdown()
    """
)


@pytest.mark.slow  # starts a real local Ray (~10-20 s on the shared 2-core CPU)
def test_local_cluster_starts_with_token_auth_and_no_notice(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(tmp_path), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.run(
        [sys.executable, "-c", START],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["mode"] == "token"  # Ray's own default for a cluster ray.init() starts
    assert _mode(tmp_path / ".ray" / "auth_token") == 0o600
    assert "Token authentication" not in proc.stderr, proc.stderr
