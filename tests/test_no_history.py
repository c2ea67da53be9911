"""src/ and docs/ say what is: no issue numbers, commit hashes, results files or figures.

History lives in CHANGELOG.md, benchmark figures in benchmarks/README.md (generated from
the committed results). docs/changelog.md and docs/benchmarks.md only include those two
files, so they are not read here. README.md is read for issue numbers and commit hashes
(its comparison table is generated from the results, as benchmarks/README.md is).

Each pattern is kept narrow enough that the code's own hex (job ids, sha1s, colours) and
the docs' examples (``--rate 100/s``, ``MON#1``) pass; the self-tests at the bottom show
what each one catches and what it lets through.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
EXEMPT = {"docs/changelog.md", "docs/benchmarks.md"}
SUFFIXES = {".py", ".lua", ".md", ".js", ".html", ".css"}

# "issue 12", "issues 12 and 14", "#12" (not "MON#1", nor "owner/repo#12": another project's)
ISSUE = re.compile(r"\bissues?\s+#?\d+\b|(?<![\w/&#])#\d{1,5}\b(?![0-9a-fA-F])", re.IGNORECASE)
# a commit named as one: "commit 4f48401", "merge a03c16b", "src/echomq 92206e1", "@4f48401"
COMMIT = re.compile(
    r"\b(?:commits?|merged?|merge commit|revision|rev|sha|hash|head|src/echomq|benchmarks?"
    r"|branch)\b[\s:=(`]+(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
    r"|(?<![\w.-])@(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b",
    re.IGNORECASE,
)
# a short hash standing alone in prose: 7 to 12 hex digits, letters and digits mixed, in
# backticks or parentheses, as a reference is written ("(a03c16b)", "`4f48401`")
LONE_HASH = re.compile(r"[`(](?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}[`),;]")
# a results file: anything under benchmarks/results/ named, or a dated results name
RESULTS = re.compile(
    r"results/(?:published/)?[\w.-]+\.json|\b[\w-]+-20\d{6}[a-z]?\.json\b", re.IGNORECASE
)
# a measured figure: a rate, a per-job or per-call cost, a ratio, a speed-up
FIGURE = re.compile(
    r"\d[\d,.]*\s*(?:k\s*)?(?:jobs|enqueues|claims|calls|commands|ops|requests|messages)"
    r"\s*(?:/\s*s|per\s+second)\b"
    r"|\d[\d,.]*\s*(?:µs|us|ns)\b"
    r"|\d[\d,.]*\s*ms\s+per\s+(?:job|call|command|claim|enqueue|run)\b"
    r"|(?<![\w.])x\d+\.\d+\b"
    r"|\b\d+(?:\.\d+)?\s*(?:x|\u00d7|times)\s+(?:faster|slower|as\s+fast|the\s+speed)\b"
    r"|\d+(?:\.\d+)?\s*%\s+(?:of\s+(?:[\w']+\s+){0,3})?(?:the\s+)?cpu\b"
    r"|\d+(?:\.\d+)?\s*%\s+(?:faster|slower|fewer|more\s+jobs)\b"
    r"|~?\d+(?:\.\d+)?\s+of\s+(?:[\w'-]+\s+){0,2}ceiling\b"
    r"|\b(?:median|best)\s+of\s+\d+\s+runs?\b"
    r"|\bheld\s+Redis\s+for\s+~?\d"
    r"|\bin\s+about\s+\d[\d.,]*\s*(?:µs|ms|s)\b"
    r"|\d[\d.,]*\s*(?:bytes|KiB|MiB)\s+(?:of\s+Redis\s+memory\s+)?per\s+(?:\w+\s+)?job\b"
    r"|\d[\d.,-]*\s*(?:µs|ms|s)\s+on\s+a\s+\S+-job\s+queue\b"
    r"|\bmeasured\b[:\s][^.\n]*?\d[\d.,]*\s*(?:µs|ms|s|%|x)?(?:\s|$|[,;)])",
    re.IGNORECASE,
)

ALL = {"issue number": ISSUE, "commit hash": COMMIT, "lone hash": LONE_HASH}
ALL |= {"results file": RESULTS, "benchmark figure": FIGURE}
README_ONLY = {"issue number": ISSUE, "commit hash": COMMIT, "lone hash": LONE_HASH}


def files() -> list[Path]:
    found = [p for p in (ROOT / "src").rglob("*") if p.suffix in SUFFIXES]
    found += list((ROOT / "docs").rglob("*.md"))
    return sorted(p for p in found if p.relative_to(ROOT).as_posix() not in EXEMPT)


def hits(text: str, patterns: dict[str, re.Pattern[str]]) -> list[tuple[int, str, str]]:
    """(line number, kind, the text matched) of every pattern found in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in patterns.items():
            found += [(number, kind, m.group(0)) for m in pattern.finditer(line)]
    return found


def report(path: Path, found: list[tuple[int, str, str]]) -> str:
    where = path.relative_to(ROOT).as_posix()
    return "\n".join(f"{where}:{n}: {kind}: {text!r}" for n, kind, text in found)


@pytest.mark.parametrize("path", files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_history_or_figures(path: Path) -> None:
    """History goes to CHANGELOG.md; figures to benchmarks/README.md (from the results)."""
    found = hits(path.read_text(encoding="utf-8"), ALL)
    assert not found, report(path, found)


def test_the_readme_names_no_issue_nor_commit() -> None:
    path = ROOT / "README.md"
    found = hits(path.read_text(encoding="utf-8"), README_ONLY)
    assert not found, report(path, found)


@pytest.mark.parametrize(
    "planted",
    [
        "the lanes (issue 12) decide",
        "as issues 12 and 14 asked",
        "see #18 for why",
        "measured at commit 4f48401",
        "src/echomq 92206e1, benchmark a03c16b",
        "pinned @92206e1a",
        "the run (`a03c16b`) shows",
        "in benchmarks/results/published/lanes-20261201b.json",
        "`repeat-soak-20261201.json`",
        "it drains 12,400 jobs/s",
        "6,900 enqueues/s at 64 callers",
        "costs ~5 µs per call",
        "claim: 38 us",
        "4-8 ms per call on a 1M-job queue",
        "x1.04 at count=1",
        "about 2.1x faster than before",
        "~10 % of a busy worker's CPU",
        "0.6-0.7 -> ~0.95 of redis-benchmark's ceiling",
        "µs per command, median of 8 runs",
        "one call over 200,000 pending jobs held Redis for 1.1 s",
        "a step of 500 takes ~3 ms on a 1M-job queue",
        "Measured: 100/s with 4 worker processes",
        "runs to its callback's result in about 1 s",
        "about 580 bytes of Redis memory per waiting job",
    ],
)
def test_a_planted_example_is_caught(planted: str) -> None:
    assert hits(planted, ALL), planted


@pytest.mark.parametrize(
    "fine",
    [
        "active 3f0c9b1e0a8d4c55a1f1b0c0f6a3d2e1 progress=10",  # a job id
        "sha1 of the script: `e0e1f9fabfc9d4800c877a703b823ac0578ff8db`",  # 40 hex
        "--completed: #059669;",  # a colour
        "cron's `MON#1` is the first Monday",
        "psycopg/psycopg2#1057 asks for Trio",  # another project's issue
        "echomq limits emails --rate 100/s",  # a setting, not a measurement
        "`keep_result` 24 h, a 2^40 ms cap, 5/250ms",
        "jobs per second, one point per poll (a 5 s moving average)",
        "the results of `python -m benchmarks cpu_per_job` (benchmarks/README.md)",
        "a job's 32-hex id, `deadbeef` keys, `emq:{q}:job:1`",
        "#KEYS and #ARGV[1] in Lua",
    ],
)
def test_an_ordinary_line_passes(fine: str) -> None:
    assert not hits(fine, ALL), hits(fine, ALL)
