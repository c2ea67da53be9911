"""Make each peer's virtual environment under ``benchmarks/.peers/<name>`` from PyPI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from . import PEERS, Peer

__all__ = ["PEERS_DIR", "ensure", "python_of", "versions"]

PEERS_DIR = Path(__file__).resolve().parent.parent / ".peers"


def python_of(peer: Peer) -> Path:
    return PEERS_DIR / peer.name / "bin" / "python"


def ensure(peer: Peer, *, upgrade: bool = False) -> Path:
    """Create the venv and install the peer (once); answer its python. Raises on failure."""
    py = python_of(peer)
    marker = PEERS_DIR / peer.name / ".installed"
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
    marker.write_text(json.dumps(versions(peer)))
    return py


def versions(peer: Peer) -> dict[str, str]:
    """Installed versions of the packages the results table names."""
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
    found: dict[str, str] = json.loads(out.stdout)
    return found


if __name__ == "__main__":
    names = sys.argv[1:] or list(PEERS)
    for name in names:
        try:
            ensure(PEERS[name])
            print(name, versions(PEERS[name]), flush=True)
        except subprocess.CalledProcessError as exc:
            print(name, "FAILED", exc, flush=True)
