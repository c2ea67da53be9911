"""``python -m benchmarks NAME [flags]``: run one benchmark (``NAME --help``: its flags).

Every benchmark starts its own private redis-server(s); nothing touches a system Redis.
Results land in benchmarks/results/scratch/ unless ``--publish`` says otherwise
(benchmarks/README.md says what each one measures).
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["BENCHMARKS", "main"]

# the subcommands, in the order benchmarks/README.md presents them: each is the module
# benchmarks.<name>, with its own parser, and names its published results file
BENCHMARKS = (
    "peers",
    "verbs",
    "e2e",
    "cpu_per_job",
    "processes",
    "lua_cost",
    "producer_cpu",
    "codecs",
    "floor",
    "bounds",
    "archive",
    "stream",
    "idle",
    "flows",
    "steps",
    "lanes",
    "weights",
    "repeat_soak",
    "stopkit",
    "poison_mix",
    "cluster",
    "ecosystem",
    "profile_e2e",
    "profile_claim",
    "profile_io",
    "report",
)


def _summary(name: str) -> str:
    try:
        doc = importlib.import_module(f"benchmarks.{name}").__doc__ or ""
    except ImportError as exc:  # a missing optional dependency: say so, list the rest
        return f"(cannot import: {exc})"
    return doc.strip().splitlines()[0].strip("`") if doc.strip() else ""


def usage() -> str:
    width = max(map(len, BENCHMARKS))
    lines = [(__doc__ or "").strip(), "", "benchmarks:"]
    lines += [f"  {name.ljust(width)}  {_summary(name)}" for name in BENCHMARKS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        raise SystemExit(f"python -m benchmarks: no benchmark {name!r}\n\n{usage()}")
    importlib.import_module(f"benchmarks.{name}").main(rest)


if __name__ == "__main__":
    main()
