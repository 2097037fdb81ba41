"""The import contract between the layers, read from the source (AST; no dependency).

- ``factory`` (the library) imports no package above it (teleop, dataview, exporters,
  policies, pipelines, the plugins, bench), never typer, and ray or lerobot only lazily
  (inside a function) in the places listed in :data:`LAZY_HEAVY`.
- The edge packages (teleop, dataview, exporters, policies) import no ``pipelines``.
- The lerobot plugins import no ``pipelines`` and only public names: no module or name
  with a leading underscore.

:func:`violations` checks one source text as if it were at a repository path, so the
checker itself is tested on sources that break each rule.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ("lerobot_env_demofactory", "lerobot_robot_demofactory")
EDGES = ("teleop", "dataview", "exporters", "policies")
ABOVE_FACTORY = frozenset({*EDGES, "pipelines", "plugins", "bench", *PLUGINS})
HEAVY = frozenset({"ray", "typer", "lerobot"})
LAZY_HEAVY = frozenset({("factory/generators/policy.py", "lerobot")})
"""(file, library): the lazy imports of ray or lerobot that factory has, each one inside
a function (loading a LeRobot policy checkpoint as a generator). Typer: none."""


@dataclass(frozen=True)
class Import:
    """One import: the absolute module, the names taken from it, and where."""

    module: str
    names: tuple[str, ...]
    line: int
    lazy: bool  # inside a function: runs when called, not on import

    @property
    def root(self) -> str:
        return self.module.split(".")[0]


def _package(path: str) -> list[str]:
    """The package a repository file belongs to, as module parts (for relative imports)."""
    parts = Path(path).with_suffix("").parts
    if parts[0] == "plugins":
        parts = parts[2:]  # plugins/<distribution>/<package>/...
    return list(parts[:-1])


def imports(source: str, path: str) -> list[Import]:
    """Every import in ``source`` (a file at repository ``path``), with ``importlib``'s
    ``import_module("name")`` calls of a literal name."""
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, (), child.lineno, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append(_from(child, path, lazy))
            elif isinstance(child, ast.Call) and _called(child) in ("import_module", "__import__"):
                arg = child.args[0] if child.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append(Import(arg.value, (), child.lineno, lazy))
            visit(child, inner)

    visit(ast.parse(source, filename=path), False)
    return found


def _from(node: ast.ImportFrom, path: str, lazy: bool) -> Import:
    module = node.module or ""
    if node.level:
        base = _package(path)[: len(_package(path)) - node.level + 1]
        module = ".".join([*base, *([module] if module else [])])
    return Import(module, tuple(a.name for a in node.names), node.lineno, lazy)


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def violations(source: str, path: str) -> list[str]:
    """The contract's violations in ``source`` read as the file at repository ``path``."""
    top = Path(path).parts[0]
    out = []
    for imp in imports(source, path):
        where = f"{path}:{imp.line}: {imp.module}"
        if top == "factory":
            if imp.root in ABOVE_FACTORY:
                out.append(f"{where}: factory imports a layer above it")
            elif imp.root in HEAVY and not (imp.lazy and (path, imp.root) in LAZY_HEAVY):
                how = "a lazy import not listed in LAZY_HEAVY" if imp.lazy else "at import time"
                out.append(f"{where}: factory imports {imp.root} {how}")
        elif top in EDGES and imp.root in ("pipelines", "bench"):
            out.append(f"{where}: {top} imports the commands layer")
        elif top == "plugins":
            if imp.root in ("pipelines", "bench"):
                out.append(f"{where}: a plugin imports the commands layer")
            private = [p for p in (*imp.module.split("."), *imp.names) if _private(p)]
            if private:
                out.append(f"{where}: a plugin imports private {', '.join(private)}")
    return out


def _private(name: str) -> bool:
    """``_name`` is private; ``__name__`` (``__future__``, ``__version__``) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _sources() -> list[Path]:
    dirs = [
        ROOT / "factory",
        *(ROOT / d for d in EDGES),
        *(ROOT / "plugins" / p / p for p in PLUGINS),
    ]
    return sorted(f for d in dirs if d.is_dir() for f in d.rglob("*.py"))


def test_the_repository_keeps_the_contract() -> None:
    files = _sources()
    assert any(f.parts[-2:] == ("gen", "plan.py") for f in files), "factory not found"
    assert sum(f.is_relative_to(ROOT / "plugins") for f in files) >= 2, "plugins not found"
    found = [v for f in files for v in violations(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == [], "\n".join(found)


def test_every_listed_lazy_import_still_exists() -> None:
    """LAZY_HEAVY lists what exists, no more: a removed lazy import leaves the list."""
    for path, lib in sorted(LAZY_HEAVY):
        got = imports((ROOT / path).read_text(), path)
        assert any(i.root == lib and i.lazy for i in got), (path, lib)


@pytest.mark.parametrize(
    ("path", "source", "needle"),
    [
        ("factory/x.py", "from pipelines.generate import run_generate\n", "layer above"),
        ("factory/x.py", "import teleop.node\n", "layer above"),
        ("factory/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
         "    from exporters.lerobot_plugin import open_world\n", "layer above"),
        ("factory/a/b.py", "from ...bench import zero_real_run\n", "layer above"),
        ("factory/x.py", "import ray\n", "ray at import time"),
        ("factory/x.py", "class A:\n    import typer\n", "typer at import time"),
        ("factory/x.py", "def f():\n    import ray.util\n", "not listed in LAZY_HEAVY"),
        ("factory/x.py", "def f():\n    import typer\n", "not listed in LAZY_HEAVY"),
        ("factory/x.py", "import importlib\nimportlib.import_module('lerobot.policies')\n",
         "lerobot at import time"),
        ("factory/generators/policy.py", "from lerobot.configs import types\n",
         "lerobot at import time"),
        ("exporters/x.py", "def f():\n    from pipelines.cli import app\n", "commands layer"),
        ("teleop/x.py", "import pipelines\n", "commands layer"),
        ("policies/x.py", "from pipelines import console\n", "commands layer"),
        ("plugins/lerobot_env_demofactory/lerobot_env_demofactory/__init__.py",
         "def f():\n    from pipelines.cli import app\n", "commands layer"),
        ("plugins/lerobot_robot_demofactory/lerobot_robot_demofactory/__init__.py",
         "from factory.envs._geometry import area\n", "private _geometry"),
        ("plugins/lerobot_robot_demofactory/lerobot_robot_demofactory/__init__.py",
         "from factory.world import _spec\n", "private _spec"),
    ],
)  # fmt: skip
def test_the_checker_finds_each_kind_of_violation(path: str, source: str, needle: str) -> None:
    found = violations(source, path)
    assert len(found) == 1 and needle in found[0], found


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("factory/generators/policy.py", "def load():\n    from lerobot.configs import types\n"),
        ("factory/gen/x.py", "from ..record import open_output\nfrom . import jobs\n"),
        ("factory/x.py", "from __future__ import annotations\nimport torch\n"),
        ("exporters/x.py", "from lerobot.datasets import LeRobotDataset\nimport factory\n"),
        ("plugins/lerobot_env_demofactory/lerobot_env_demofactory/__init__.py",
         "from __future__ import annotations\nfrom exporters.lerobot_plugin import open_world\n"),
        ("pipelines/x.py", "import ray\nfrom teleop import node\n"),
    ],
)  # fmt: skip
def test_the_checker_passes_what_the_contract_allows(path: str, source: str) -> None:
    assert violations(source, path) == []


def test_relative_imports_resolve_to_their_package() -> None:
    got = imports("from ..record import open_output\nfrom . import jobs\n", "factory/gen/x.py")
    assert [(i.module, i.names) for i in got] == [
        ("factory.record", ("open_output",)),
        ("factory.gen", ("jobs",)),
    ]
