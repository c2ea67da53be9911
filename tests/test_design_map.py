"""docs/design.md's module map is the tree: one line per module of src/echomq, under its layer.

The map is the "## Module map" section: a "### <layer>" heading per layer of
tests/test_layers.py, each over a table whose rows start with a module's path relative to
src/echomq, in backticks (``| `_worker/pool.py` | what it holds |``).
"""

from __future__ import annotations

import re
from pathlib import Path

from test_layers import FOLDERS, ORDER, PACKAGE, TOP, layer_of

DESIGN = Path(__file__).parent.parent / "docs" / "design.md"
ROW = re.compile(r"^\|\s*`([^`]+\.py)`\s*\|(.*)\|\s*$")
LAYER = re.compile(r"^###\s+(\S+)\s*$")


def module_name(path: str) -> str:
    """``_worker/pool.py`` -> ``echomq._worker.pool``; ``admin/__init__.py`` -> ``echomq.admin``."""
    parts = ["echomq", *Path(path).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def tree() -> list[str]:
    """Every module file of src/echomq, as a path relative to it."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


def parse_map(text: str) -> dict[str, tuple[str, str]]:
    """The map's rows: module path -> (the layer heading it sits under, its description)."""
    lines = text.splitlines()
    try:
        start = lines.index("## Module map")
    except ValueError:
        raise AssertionError('docs/design.md has no "## Module map" section') from None
    rows: dict[str, tuple[str, str]] = {}
    layer = ""
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if heading := LAYER.match(line):
            layer = heading.group(1)
        elif row := ROW.match(line):
            path, what = row.group(1), row.group(2).strip()
            assert path not in rows, f"docs/design.md's module map lists {path} twice"
            rows[path] = (layer, what)
    return rows


def check(rows: dict[str, tuple[str, str]], modules: list[str]) -> list[str]:
    """What is wrong between the map and the tree, each problem saying what to do."""
    problems = []
    for path in modules:
        if path not in rows:
            layer = layer_of(module_name(path))
            problems.append(
                f"src/echomq/{path} has no line in docs/design.md's module map: add "
                f"'| `{path}` | what it holds |' under '### {layer}'"
            )
    for path, (layer, what) in rows.items():
        if path not in modules:
            problems.append(
                f"docs/design.md's module map names {path}, which is not in src/echomq: "
                "remove its line (or fix its path)"
            )
            continue
        expected = layer_of(module_name(path))
        if layer != expected:
            problems.append(
                f"docs/design.md's module map lists {path} under '### {layer or '(none)'}'; "
                f"tests/test_layers.py places it in '{expected}': move its line"
            )
        if not what:
            problems.append(f"docs/design.md's module map: {path} says nothing it holds")
    return problems


def test_the_module_map_is_the_tree() -> None:
    problems = check(parse_map(DESIGN.read_text(encoding="utf-8")), tree())
    assert not problems, "\n".join(problems)


def test_the_map_has_one_heading_per_layer_in_order() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("## Module map") :].split("\n## ", 1)[0]
    headings = [m.group(1) for line in section.splitlines() if (m := LAYER.match(line))]
    assert tuple(headings) == ORDER


def diagram_blocks(text: str) -> dict[str, set[str]]:
    """The diagram in "## Layers": each layer's line (and the indented lines under it) as
    the set of names it shows (``_worker/`` -> ``_worker``)."""
    section = text[text.index("## Layers") :].split("\n## ", 1)[0]
    diagram = section.split("```", 2)[1]
    blocks: dict[str, set[str]] = {}
    layer = ""
    for line in diagram.splitlines():
        if line[:1].isalpha():
            layer, line = line.split(None, 1)[0], line.split(None, 1)[1]
            blocks[layer] = set()
        if layer:
            blocks[layer] |= {word.strip("/,()") for word in line.split()}
    return blocks


def test_the_layer_diagram_is_test_layers() -> None:
    """The diagram lists the layers of tests/test_layers.py, lowest first, and each folder
    and top-level module of its tables in its layer's lines."""
    blocks = diagram_blocks(DESIGN.read_text(encoding="utf-8"))
    assert tuple(blocks) == ORDER
    wrong = [
        f"docs/design.md's layer diagram: put {name} in the '{layer}' line"
        for name, layer in sorted({**FOLDERS, **TOP}.items())
        if name not in blocks[layer]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_missing_a_stale_and_a_misplaced_line() -> None:
    sample = "\n".join(
        [
            "## Module map",
            "### shared",
            "| module | what it holds |",
            "|---|---|",
            "| `errors.py` | every error |",
            "| `_worker/pool.py` | the slot pool |",
            "| `gone.py` | a module that went |",
            "## Next",
            "| `config.py` | after the map: not a row of it |",
        ]
    )
    rows = parse_map(sample)
    assert set(rows) == {"errors.py", "_worker/pool.py", "gone.py"}
    problems = check(rows, ["errors.py", "_worker/pool.py", "config.py"])
    assert len(problems) == 3, problems
    assert "add '| `config.py` | what it holds |' under '### shared'" in problems[0]
    assert "_worker/pool.py under '### shared'" in problems[1]
    assert "'runtime'" in problems[1]
    assert "names gone.py" in problems[2]
