"""The layers hold: every import in src/echomq points down, and no import cycle.

The layers, lowest first (docs/design.md draws them). A folder is one layer; the top-level
modules are placed one by one::

    shared     errors, config, _trio, _jitter, _tracing, _http  importable from any layer
    model      _model/                                   plain values and rules
    wire       _wire/                                    RESP connections, pub/sub, drivers
    scripts    _scripts/                                 the Lua, its calls, replies, keyspace
    verbs      jobs/, admin/, cancel, stalled, repeat, flows, completions
    client     _client/, results, events                 services that outlive one call
    runtime    _worker/
    surfaces   echomq (the package), __main__, app, queue, task, handle, canvas, sync,
               asyncio, testing,
               cli/, dashboard/, archive/, _testkit/ (servers, faults, the demo)

A module may import its own layer and those below. Every import counts: module level,
inside a function, under ``TYPE_CHECKING``. The cycle check counts the imports a module
runs when it is imported (not those in functions, nor under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src"
PACKAGE = SRC / "echomq"

ORDER = ("shared", "model", "wire", "scripts", "verbs", "client", "runtime", "surfaces")
FOLDERS = {
    "_model": "model",
    "_wire": "wire",
    "_scripts": "scripts",
    "jobs": "verbs",
    "admin": "verbs",
    "_client": "client",
    "_worker": "runtime",
    "cli": "surfaces",
    "dashboard": "surfaces",
    "archive": "surfaces",
    "_testkit": "surfaces",
}
TOP = {
    "errors": "shared",
    "config": "shared",
    "_trio": "shared",
    "_jitter": "shared",
    "_tracing": "shared",
    "_http": "shared",
    "cancel": "verbs",
    "stalled": "verbs",
    "repeat": "verbs",
    "flows": "verbs",
    "completions": "verbs",
    "results": "client",
    "events": "client",
    "__main__": "surfaces",
    "app": "surfaces",
    "queue": "surfaces",
    "task": "surfaces",
    "handle": "surfaces",
    "canvas": "surfaces",
    "sync": "surfaces",
    "asyncio": "surfaces",
    "testing": "surfaces",
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts == ["echomq"]:
        return "surfaces"
    place = parts[1]
    layer = FOLDERS.get(place) if len(parts) > 2 or place in FOLDERS else TOP.get(place)
    if layer is None:
        raise AssertionError(
            f"{module} belongs to no layer: add its folder to tests/test_layers.py"
        )
    return layer


def allowed(source: str, target: str) -> bool:
    """May a module of layer ``source`` import one of layer ``target``?"""
    return ORDER.index(target) <= ORDER.index(source)


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = modules()


class Import:
    """One import statement's targets; ``typing``: under ``if TYPE_CHECKING:``; ``lazy``:
    inside a function (it runs when called, not when the module is imported)."""

    def __init__(self, targets: list[str], line: int, typing: bool, lazy: bool) -> None:
        self.targets, self.line, self.typing, self.lazy = targets, line, typing, lazy


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    is_package = MODULES[module].name == "__init__.py"
    base = module.split(".")
    if node.level:
        base = base if is_package else base[:-1]
        base = base[: len(base) - (node.level - 1)]
        stem = ".".join(base + ([node.module] if node.module else []))
    else:
        stem = node.module or ""
    targets = []
    for alias in node.names:
        child = f"{stem}.{alias.name}"
        targets.append(child if child in MODULES else stem)
    return targets


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str) -> Iterator[Import]:
    """Every echomq import of ``module``: module level, in functions, under TYPE_CHECKING."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))

    def walk(node: ast.AST, typing: bool, lazy: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for inner in child.body:
                    yield from walk(ast.Module(body=[inner], type_ignores=[]), True, lazy)
                for inner in child.orelse:
                    yield from walk(ast.Module(body=[inner], type_ignores=[]), typing, lazy)
            elif isinstance(child, ast.ImportFrom):
                targets = [t for t in _resolve(module, child) if t.split(".")[0] == "echomq"]
                if targets:
                    yield Import(targets, child.lineno, typing, lazy)
            elif isinstance(child, ast.Import):
                targets = [a.name for a in child.names if a.name.split(".")[0] == "echomq"]
                if targets:
                    yield Import(targets, child.lineno, typing, lazy)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, typing, True)
            else:
                yield from walk(child, typing, lazy)

    yield from walk(tree, False, False)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    """Every echomq import of this module targets its own layer or a lower one."""
    source = layer_of(module)
    wrong = [
        f"line {imp.line}: {module} ({source}) imports {target} ({layer_of(target)})"
        for imp in imports_of(module)
        for target in imp.targets
        if not allowed(source, layer_of(target))
    ]
    assert not wrong, "\n".join(wrong)


def test_there_is_no_import_cycle() -> None:
    """The imports a module runs when it is imported form no cycle. Not counted: imports
    under ``TYPE_CHECKING`` (for the type checker), imports inside a function (a factory
    that picks a class when called, as ``archive.store.open_store`` does; the direction
    test above still checks them), and the package ``echomq`` itself as a target (it
    re-exports the surface)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for imp in imports_of(module):
            if not imp.typing and not imp.lazy:
                graph[module] |= {t for t in imp.targets if t not in (module, "echomq")}
    cycle = _find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_the_checker_sees_an_upward_import() -> None:
    """The rules themselves: a verb may not import the runtime, the model not the wire."""
    assert not allowed("verbs", "runtime")
    assert not allowed("verbs", "client")
    assert not allowed("model", "wire")
    assert allowed("runtime", "client") and allowed("wire", "shared")
    assert layer_of("echomq._testkit.redis_server") == "surfaces"
    assert layer_of("echomq.jobs.lifecycle") == "verbs"
    assert layer_of("echomq._worker.context") == "runtime"
    assert layer_of("echomq.cli.worker_cmd") == "surfaces"
