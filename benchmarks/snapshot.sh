#!/usr/bin/env bash
# Measure a fixed commit, not a working tree that others are editing:
#   benchmarks/snapshot.sh [REV] -- <python -m benchmarks arguments>
# exports REV (default HEAD) with `git archive` into /tmp/echomq-bench-<sha>, links the
# peers' venvs (benchmarks/.peers) into it, and runs `python -m benchmarks` from there with
# PYTHONPATH pointing at the snapshot (the repo's .venv supplies the dependencies).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rev="HEAD"
if [[ $# -gt 0 && "$1" != "--" ]]; then rev="$1"; shift; fi
[[ $# -gt 0 && "$1" == "--" ]] && shift
sha="$(git -C "$repo" rev-parse --short "$rev")"
snap="/tmp/echomq-bench-$sha"
# (a folder without benchmarks/ is the peers harness's echomq@REV export, src/ only: complete it)
if [[ ! -d "$snap/benchmarks" ]]; then
  mkdir -p "$snap"
  git -C "$repo" archive "$sha" | tar -x -C "$snap"
  echo "$sha" > "$snap/COMMIT"
fi
mkdir -p "$repo/benchmarks/.peers" "$repo/benchmarks/results"
ln -sfn "$repo/benchmarks/.peers" "$snap/benchmarks/.peers"
ln -sfn "$repo/benchmarks/results" "$snap/benchmarks/results"
cd "$snap"
PYTHONPATH="$snap/src:$snap" exec nice -n 10 "$repo/.venv/bin/python" -m benchmarks "$@"
