"""Make each peer's environment under ``benchmarks/.peers/<name>`` (ignored by git): a venv
from PyPI for the Python peers, ``npm install`` of the pinned packages for the Node one
(bullmq-node). An environment is made again when its peer's requirements change.

    python -m benchmarks.adapters.venvs [NAME...]   # make them now, print the versions
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from . import PEERS, Peer

__all__ = ["PEERS_DIR", "ensure", "node_modules", "python_of", "versions"]

PEERS_DIR = Path(__file__).resolve().parent.parent / ".peers"


def python_of(peer: Peer) -> Path:
    return PEERS_DIR / peer.name / "bin" / "python"


def node_modules(peer: Peer) -> Path:
    return PEERS_DIR / peer.name / "node_modules"


def ensure(peer: Peer, *, upgrade: bool = False) -> Path:
    """Create the environment and install the peer (once); answer its python (or node).

    Raises on failure."""
    marker = PEERS_DIR / peer.name / ".installed"
    if marker.exists() and _installed(marker) != list(peer.requirements):
        upgrade = True
    if peer.kind == "node":
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not installed")
        if not marker.exists() or upgrade:
            (PEERS_DIR / peer.name).mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["npm", "install", "--prefix", str(PEERS_DIR / peer.name), "--no-audit",
                 "--no-fund", "--loglevel=error", *peer.requirements],
                check=True,
            )  # fmt: skip
            _mark(marker, peer)
        return Path(node)
    py = python_of(peer)
    if marker.exists() and not upgrade:
        return py
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_DIR / peer.name)], check=True)
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-U",
            *peer.requirements,
        ],
        check=True,
    )
    _mark(marker, peer)
    return py


def _mark(marker: Path, peer: Peer) -> None:
    marker.write_text(json.dumps({"requirements": list(peer.requirements), **versions(peer)}))


def _installed(marker: Path) -> list[str] | None:
    """The requirements an environment was made from (None: an older marker)."""
    try:
        found = json.loads(marker.read_text()).get("requirements")
    except (ValueError, AttributeError):
        return None
    return list(found) if isinstance(found, list) else None


def _npm_version(peer: Peer, package: str) -> str:
    """The version node resolves for ``package`` (bullmq's own copy of ioredis if nested)."""
    top = node_modules(peer)
    nested = top / "bullmq" / "node_modules" / package / "package.json"
    found = nested if nested.exists() else top / package / "package.json"
    version: str = json.loads(found.read_text())["version"]
    return version + (" (bullmq's own copy)" if found == nested else "")


def versions(peer: Peer) -> dict[str, str]:
    """Installed versions of the packages the results table names."""
    if peer.kind == "node":
        node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True)
        found = {p: _npm_version(peer, p) for p in peer.version_of}
        return {**found, "node": node.stdout.strip()}
    code = (
        "import json, sys, importlib.metadata as m\n"
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [str(python_of(peer)), "-c", code, *peer.version_of],
        check=True,
        capture_output=True,
        text=True,
    )
    answer: dict[str, str] = json.loads(out.stdout)
    return answer


if __name__ == "__main__":
    names = sys.argv[1:] or list(PEERS)
    for name in names:
        try:
            ensure(PEERS[name])
            print(name, versions(PEERS[name]), flush=True)
        except subprocess.CalledProcessError as exc:
            print(name, "FAILED", exc, flush=True)
