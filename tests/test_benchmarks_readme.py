"""benchmarks/ stays something a newcomer can rerun: its README's figures are exactly what
the committed results files generate, each benchmark shows only its own flags, and the
package has no import cycle. No benchmark runs here: only the renderers, on the committed
files."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks import files, report
from benchmarks.__main__ import BENCHMARKS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "benchmarks"


def test_the_readme_is_what_the_published_results_generate() -> None:
    text = report.README.read_text()
    assert report.rewrite(text) == text, "run: python -m benchmarks report --readme"


def test_every_published_file_has_its_block_and_every_block_its_file() -> None:
    blocks = report.block_names(report.README.read_text())
    published = sorted(p.stem for p in files.PUBLISHED.glob("*.json"))
    assert sorted(blocks) == published
    assert len(blocks) == len(set(blocks))
    assert set(published) <= set(BENCHMARKS)
    assert not [p for p in files.PUBLISHED.iterdir() if p.suffix != ".json"]


def test_every_block_carries_figures() -> None:
    for name in report.block_names(report.README.read_text()):
        body = report.render(name)
        assert "|---" in body, name  # a table
        assert f"results/published/{name}.json" in body, name  # names its source


def test_the_readme_names_no_commit_issue_or_branch() -> None:
    text = report.README.read_text()
    hashes = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", w)]
    assert hashes == []
    assert re.findall(r"(?i)\bissue\s*\d+|#\d+\b|\bbranch\b", text) == []
    assert "/work/" not in text and "/tmp/" not in text


def test_a_changed_figure_makes_the_readme_stale(tmp_path: Path) -> None:
    doc = files.load(files.published("bounds"))
    doc["cases"][0]["median_ms"] += 1.0
    changed = tmp_path / "bounds.json"
    files.write(changed, doc)
    assert report.render("bounds", changed) != report.render("bounds")


FLAGS = [("verbs", "--callers", "--peer"), ("peers", "--peer", "--callers")]


@pytest.mark.parametrize(("name", "own", "foreign"), FLAGS)
def test_a_benchmark_shows_only_its_own_flags(name: str, own: str, foreign: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", name, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert own in done.stdout
    assert foreign not in done.stdout


def _imports_at_import_time(path: Path) -> set[str]:
    """The benchmarks modules ``path`` imports when it is imported (not inside functions)."""
    tree = ast.parse(path.read_text())
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = [*base, *(node.module.split(".") if node.module else [])]
            if module[:1] != ["benchmarks"]:
                continue
            found.add(".".join(module))
            found |= {".".join([*module, a.name]) for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("benchmarks")}
    return found


def test_benchmarks_has_no_import_cycle() -> None:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph = {m: _imports_at_import_time(p) & set(modules) - {m} for m, p in modules.items()}

    def cycle_from(start: str, at: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(graph[at]):
            if nxt == start:
                return (*seen, nxt)
            if nxt not in seen:
                found = cycle_from(start, nxt, (*seen, nxt))
                if found:
                    return found
        return None

    cycles = [c for m in sorted(graph) if (c := cycle_from(m, m, (m,)))]
    assert cycles == []
