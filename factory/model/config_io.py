"""The JSON round trip of the state kinds' typed configs (``object_state``, ``object_set``).

A kind's whole-model config is a frozen dataclass of per-part sections; :class:`KindConfig`
gives it ``with_parts``, ``to_dict`` / ``to_json`` (the format header of
:data:`factory.model.config.FORMAT` plus every field) and ``from_dict``, which refuses
another kind and any unknown key. The class names its ``KIND`` and its ``SECTIONS``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any, ClassVar, Self

from factory.model.config import FORMAT, FORMAT_VERSION, to_jsonable


class KindConfig:
    """Mixin for a kind's frozen config dataclass (with ``parts`` and ``kind`` fields)."""

    KIND: ClassVar[str]
    SECTIONS: ClassVar[dict[str, type]]
    parts: tuple[str, ...]

    def with_parts(self, *parts: str) -> Self:
        return dataclasses.replace(self, parts=tuple(sorted(set(self.parts) | set(parts))))  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION}
        out.update(to_jsonable(dataclasses.asdict(self)))  # type: ignore[call-overload]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Parse :meth:`to_dict`'s output; unknown keys raise ``ValueError``."""
        body = {k: v for k, v in data.items() if k not in ("format", "version")}
        if body.get("kind") != cls.KIND:
            raise ValueError(f"kind is {body.get('kind')!r}, expected {cls.KIND!r}")
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs: dict[str, Any] = {}
        for name, value in body.items():
            if name in cls.SECTIONS:
                kwargs[name] = section(cls.SECTIONS[name], value)
            elif name not in names:
                raise ValueError(f"unknown {cls.__name__} key {name!r}")
            else:
                kwargs[name] = tuple(value) if isinstance(value, list) else value
        return cls(**kwargs)


def parse_setting(text: str, sections: Iterable[str]) -> tuple[str, str, Any]:
    """``SECTION.FIELD=VALUE`` (``--set``) -> (section, field, value), SECTION one of
    ``sections``; VALUE is JSON, else a string, and a list becomes a tuple. ``ValueError``
    for any other shape."""
    key, sep, raw = text.partition("=")
    name, dot, field = key.strip().partition(".")
    if not sep or not dot or name not in sections or not field:
        raise ValueError(
            f"--set {text!r}: expected SECTION.FIELD=VALUE with SECTION one of "
            f"{', '.join(sections)}"
        )
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return name, field, tuple(value) if isinstance(value, list) else value


def with_overrides[C: KindConfig](config: C, overrides: tuple[str, ...]) -> C:
    """``config`` with each ``SECTION.FIELD=VALUE`` of ``overrides`` applied
    (:func:`parse_setting`, SECTION one of the kind's ``SECTIONS``). ``ValueError`` names
    an unknown section or field, or a value its dataclass refuses."""
    changes: dict[str, dict[str, Any]] = {}
    for text in overrides:
        name, field, value = parse_setting(text, tuple(config.SECTIONS))
        changes.setdefault(name, {})[field] = value
    out: Any = config
    for name, fields in changes.items():
        part = getattr(out, name)
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(part)})
        if unknown:
            raise ValueError(f"unknown {name} field(s): {', '.join(unknown)}")
        out = dataclasses.replace(out, **{name: dataclasses.replace(part, **fields)})
    return out


def section[T](cls: type[T], data: dict[str, Any]) -> T:
    """A section dataclass from its dict (lists back to tuples); unknown keys raise."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {sorted(unknown)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
