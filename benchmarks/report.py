"""The README's tables, generated from the published results (no benchmark runs).

    python -m benchmarks report --readme      # rewrite the generated blocks of the README
    python -m benchmarks report --check       # exit 1 if the README is not current
    python -m benchmarks report NAME [--from FILE]   # print NAME's tables (any results file)

benchmarks/README.md holds one block per published benchmark, between
``<!-- generated:NAME begin -->`` and ``<!-- generated:NAME end -->``; each block is what
``benchmarks.NAME.readme()`` makes of ``results/published/NAME.json``, and nothing else in
the README carries a figure.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

from . import files

__all__ = ["README", "block_names", "main", "render", "rewrite"]

README = Path(__file__).resolve().parent / "README.md"
_BLOCK = re.compile(
    r"(<!-- generated:(?P<name>[a-z0-9_]+) begin -->\n)"
    r"(?:.*?\n)?"
    r"(<!-- generated:(?P=name) end -->)",
    re.S,
)


def render(name: str, path: Path | None = None) -> str:
    """``name``'s tables from ``path`` (default: its published file)."""
    path = path or files.published(name)
    try:
        module = importlib.import_module(f"benchmarks.{name}")
    except ModuleNotFoundError as exc:
        raise SystemExit(f"report: no benchmark {name!r}") from exc
    if not hasattr(module, "readme"):
        raise SystemExit(f"report: {name} publishes no tables")
    try:
        source = path.resolve().relative_to(README.parent).as_posix()
    except ValueError:
        source = str(path)
    text: str = module.readme(files.load(path), source)
    return text.rstrip("\n")


def block_names(text: str) -> list[str]:
    return [m.group("name") for m in _BLOCK.finditer(text)]


def rewrite(text: str) -> str:
    """``text`` with every generated block made again from its published file."""
    return _BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + "\n" + m.group(3), text)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", nargs="?", help="one benchmark's tables, printed")
    p.add_argument("--from", dest="source", type=Path, help="with NAME: this results file")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--readme", action="store_true", help="rewrite benchmarks/README.md")
    what.add_argument("--check", action="store_true", help="fail if the README is not current")
    args = p.parse_args(argv)
    if args.name:
        print(render(args.name, args.source))
        return
    text = README.read_text()
    fresh = rewrite(text)
    if args.check:
        if fresh != text:
            raise SystemExit(
                "benchmarks/README.md is not current: python -m benchmarks report --readme"
            )
        print("benchmarks/README.md is current")
        return
    if args.readme:
        README.write_text(fresh)
        print(f"rewrote {', '.join(block_names(text))} in {README}")
        return
    p.print_help()


if __name__ == "__main__":
    main()
