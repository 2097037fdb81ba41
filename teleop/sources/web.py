"""The browser device: what the teleop page sends, as bus events.

The page (``teleop/viewers/static``) sends one JSON object per input over its
websocket; the server turns each into an event with :func:`parse_message`:

- ``{"type": "key", "key": "ArrowRight", "down": true}``: a ``KeyboardEvent.key``; the
  page maps gamepad buttons to keys too (A: space, Y: enter, B: n, X: x, start: r);
- ``{"type": "pointer", "u": 0.4, "v": 0.7, "buttons": 1}``: the pointer over the frame;
- ``{"type": "axes", "x": 0.2, "y": -0.9}``: the first gamepad's left stick (Gamepad API).

Anything else is ignored. :func:`web_source` is the source that reads them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from teleop.sources.events import AxesEvent, InputEvent, KeyEvent, PointerEvent
from teleop.sources.operator import web_source

MAX_MESSAGE = 1024  # bytes; longer messages are ignored


def parse_message(text: str, t: float) -> InputEvent | None:
    """One page message as an event received at ``t``, or None if it is not valid."""
    if len(text) > MAX_MESSAGE:
        return None
    try:
        msg = json.loads(text)
    except ValueError:
        return None
    if not isinstance(msg, dict):
        return None
    kind = msg.get("type")
    if kind == "key" and isinstance(msg.get("key"), str) and len(msg["key"]) <= 32:
        return KeyEvent(key=msg["key"], down=bool(msg.get("down")), t=t)
    if kind == "pointer":
        u, v = _number(msg, "u"), _number(msg, "v")
        buttons = _number(msg, "buttons")
        if u is None or v is None:
            return None
        return PointerEvent(u=u, v=v, buttons=int(buttons or 0), t=t)
    if kind == "axes":
        x, y = _number(msg, "x"), _number(msg, "y")
        if x is None or y is None:
            return None
        return AxesEvent(x=max(-1.0, min(1.0, x)), y=max(-1.0, min(1.0, y)), t=t)
    return None


def _number(msg: dict[str, Any], key: str) -> float | None:
    value = msg.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


__all__ = ["parse_message", "web_source"]
