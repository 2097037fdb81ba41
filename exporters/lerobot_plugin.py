"""What the two lerobot plugins share: opening the world model, and bad input as one line.

``lerobot_env_demofactory`` (``--env.type=demofactory``) and ``lerobot_robot_demofactory``
(``--robot.type=demofactory``) run inside lerobot's own CLIs (``lerobot-eval``,
``lerobot-record``, ``lerobot-teleoperate``), which print a traceback for any exception.
Bad input (a missing model, a model whose action space is not PushT's, an unknown device)
is instead raised as :class:`PluginInputError`, a ``SystemExit`` that writes one line on
stderr and exits with status 2 (the factory's bad-input status), with no traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

from factory.envs.model_world import ModelWorld
from factory.errors import FactoryError


class PluginInputError(SystemExit):
    """Bad input to a demofactory lerobot plugin: one line on stderr, exit status 2.

    The line is written when the error is made (it is only made to be raised): lerobot's
    CLIs print nothing of their own for a ``SystemExit``."""

    def __init__(self, message: str) -> None:
        self.message = message
        sys.stderr.write(f"demofactory: {message}\n")
        super().__init__(2)

    def __str__(self) -> str:
        return f"demofactory: {self.message}"


def check_device(device: str) -> str:
    """``auto``/``cpu``/``cuda[:N]`` -> a torch device name; anything else is refused."""
    from factory.device import resolve_device

    try:
        return resolve_device(device)
    except FactoryError as err:
        raise PluginInputError(str(err).replace("--device", "device")) from None


def check_model_dir(model: str | Path | None) -> Path | None:
    """The model directory (None: the shipped one), refused unless it holds a config.json."""
    from factory.model.files import DEFAULT_MODEL

    path = Path(model).expanduser() if model else None
    where = path or DEFAULT_MODEL
    if not (where / "config.json").is_file():
        what = "no model directory" if not where.exists() else "no config.json in"
        raise PluginInputError(f"{what} {where} (pass a world-model directory as model=DIR)")
    return path


def open_world(model: str | Path | None, device: str, batch_size: int, seed: int = 0) -> ModelWorld:
    """A batch-``batch_size`` PushT :class:`ModelWorld` of ``model`` on ``device``.

    Raises :class:`PluginInputError` for a missing or unreadable model, an unknown
    device, or a model that does not fit PushT (actions (x, y), a way to read the task state).
    """
    from factory.model.files import load_model

    path = check_model_dir(model)
    torch_device = check_device(device)
    try:
        wm, model_id = load_model(path, torch_device)
        world = ModelWorld(wm, batch_size=batch_size, seed=seed, model_id=model_id)
    except (FactoryError, OSError, ValueError) as err:  # corrupt files say ValueError
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise PluginInputError(
            f"model {path or 'shipped'} cannot run PushT (2-D (x, y) targets): {first}"
        ) from None
    return world
