"""From any teleoperator's action dict to PushT's 2-D agent target (board pixels).

``mode="auto"`` (the default) understands, in this order:

1. ``{"x": ..., "y": ...}``: an absolute target (this robot's own action features: a
   policy, a replayed dataset, or a teleoperator that already speaks PushT);
2. ``{"delta_x": ..., "delta_y": ...}``: lerobot's ``keyboard_ee`` and ``gamepad``
   teleoperators; the target moves by ``key_step`` px per unit per step, ``-delta_x``
   along x (their "left" is +x) and ``delta_y`` along y (their "up" is -y, up on screen);
3. the pressed keys of lerobot's ``keyboard`` teleoperator (``{key: None}``): arrows or
   W/A/S/D move the target ``key_step`` px per step.

Anything else holds the target (and logs once how to map it). ``mode="absolute"`` or
``"delta"`` maps two named entries of any teleoperator's action instead (``keys``)::

    target = offset + scale * (action[keys[0]], action[keys[1]])      # absolute
    target = target + scale * (action[keys[0]], action[keys[1]])      # delta, per step

e.g. an SO-100 leader arm's shoulder pan and elbow flex as the target::

    --robot.mapping=absolute --robot.target_keys='[shoulder_pan.pos,elbow_flex.pos]' \\
        --robot.target_scale='[2.56,2.56]' --robot.target_offset='[256,256]'

The target is clipped to the board, [0, 512]^2.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

BOARD = 512.0
MODES = ("auto", "absolute", "delta")
_KEY_MOVES = {
    "Key.up": (0.0, -1.0),
    "Key.down": (0.0, 1.0),
    "Key.left": (-1.0, 0.0),
    "Key.right": (1.0, 0.0),
    "w": (0.0, -1.0),
    "s": (0.0, 1.0),
    "a": (-1.0, 0.0),
    "d": (1.0, 0.0),
}


@dataclass(frozen=True)
class TargetMapping:
    """How a teleoperator's action moves the target (see the module docstring)."""

    mode: str = "auto"
    keys: tuple[str, str] = ("x", "y")
    scale: tuple[float, float] = (1.0, 1.0)
    offset: tuple[float, float] = (0.0, 0.0)
    key_step: float = 8.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mapping {self.mode!r}; use one of {', '.join(MODES)}")
        if len(self.keys) != 2 or len(self.scale) != 2 or len(self.offset) != 2:
            raise ValueError("target_keys, target_scale and target_offset need two entries each")


class TargetMapper:
    """Keeps the current target (2,) float32 and updates it from each action dict."""

    def __init__(self, mapping: TargetMapping) -> None:
        self.mapping = mapping
        self.target: np.ndarray = np.full(2, BOARD / 2, np.float32)
        self._warned = False

    def reset(self, agent_xy: np.ndarray) -> None:
        """Start from the agent's position (2,): a held target keeps the agent still."""
        self.target = np.clip(np.asarray(agent_xy, np.float32), 0.0, BOARD)

    def update(self, action: Mapping[Any, Any]) -> np.ndarray:
        """The new target (2,) float32 after ``action``."""
        m = self.mapping
        if m.mode == "absolute":
            new = np.asarray(m.offset) + np.asarray(m.scale) * self._pair(action, m.keys)
        elif m.mode == "delta":
            new = self.target + np.asarray(m.scale) * self._pair(action, m.keys)
        else:
            new = self._auto(action)
        self.target = np.clip(np.asarray(new, np.float32), 0.0, BOARD)
        return self.target.copy()

    def _auto(self, action: Mapping[Any, Any]) -> np.ndarray:
        if "x" in action and "y" in action:
            return self._pair(action, ("x", "y"))
        if "delta_x" in action and "delta_y" in action:
            d = self._pair(action, ("delta_x", "delta_y"))
            return self.target + self.mapping.key_step * np.array([-d[0], d[1]])
        moves = [_KEY_MOVES.get(_key_name(k)) for k in action]
        known = [mv for mv in moves if mv is not None]
        if not known and action and not self._warned:
            self._warned = True
            log.warning(
                "demofactory robot: cannot map action keys %s to a target; holding it. "
                "Use --robot.mapping=absolute|delta --robot.target_keys='[KEY_X,KEY_Y]'",
                sorted(str(k) for k in action),
            )
        step = np.sum(np.asarray(known, np.float32).reshape(-1, 2), axis=0)
        return self.target + self.mapping.key_step * step

    @staticmethod
    def _pair(action: Mapping[Any, Any], keys: tuple[str, str]) -> np.ndarray:
        missing = [k for k in keys if k not in action]
        if missing:
            raise KeyError(
                f"teleoperator action has no {missing} (keys: {sorted(map(str, action))})"
            )
        return np.array([float(action[keys[0]]), float(action[keys[1]])], np.float32)


def _key_name(key: Any) -> str:
    """pynput's ``Key.up`` -> "Key.up"; a character key -> its lower-case character."""
    text = str(key)
    return text if text.startswith("Key.") else text.lower()
