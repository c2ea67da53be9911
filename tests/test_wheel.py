"""The package as a user gets it: the sdist and the wheel built from this tree, the wheel
installed (not editable) into a fresh venv, and the README's first queue run from that
venv's ``bin/`` against a private redis-server.

Offline: ``python -m build --no-isolation`` uses the dev venv's build backend (hatchling,
a dev dependency), and builds the wheel from the sdist, so a file the sdist forgets
fails here. The fresh venv gets the wheel alone (``pip install --no-deps``) and echomq's
dependencies through a ``.pth`` line naming the dev venv's site-packages: a plain path
entry, which does not run the ``.pth`` files there, so the dev venv's editable echomq
(a ``.pth`` of its own) stays out and ``import echomq`` finds the wheel's copy.
"""

from __future__ import annotations

import os
import shlex
import site
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
import trio

import echomq
from _readme import ROOT, commands, write_files
from echomq.config import URL_VARIABLE, parse_url
from echomq.testing import RedisServer, open_worker_process


async def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    with trio.fail_after(60):
        done = await trio.run_process(
            command,
            cwd=cwd,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = done.stdout.decode(errors="replace")
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"{shlex.join(command)} exited {done.returncode}:\n{out}\n{err}"
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it."""
    dist = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (
        f"{done.stdout}\n{done.stderr}\n(build and hatchling are dev dependencies)"
    )
    (sdist,) = dist.glob("echomq-*.tar.gz")
    (wheel,) = dist.glob("echomq-*-py3-none-any.whl")
    return sdist, wheel


def test_the_sdist_and_the_wheel_hold_the_package_and_only_it(built: tuple[Path, Path]) -> None:
    sdist, wheel = built
    version = echomq.__version__
    assert sdist.name == f"echomq-{version}.tar.gz" and wheel.name.startswith(f"echomq-{version}-")
    names = zipfile.ZipFile(wheel).namelist()
    packaged = {n for n in names if n.startswith("echomq/")}
    source = {
        "echomq/" + p.relative_to(ROOT / "src" / "echomq").as_posix()
        for p in (ROOT / "src" / "echomq").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert packaged == source  # every module, Lua script, static file and py.typed
    assert f"echomq-{version}.dist-info/entry_points.txt" in names
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"pyproject.toml", "README.md", "LICENSE", "src/echomq/__init__.py"} <= members
    assert not [m for m in members if m.startswith((".venv/", ".hypothesis/", ".git/"))]


async def test_the_readme_runs_from_a_fresh_venv_with_the_wheel(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    _, wheel = built
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    bin_dir = env_dir / "bin"
    python = bin_dir / "python"
    await _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        tmp_path,
    )  # fmt: skip
    (new_site,) = (env_dir / "lib").glob("python3*/site-packages")
    (new_site / "_dev_dependencies.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n"  # the dev venv's: echomq's dependencies
    )
    env = {k: v for k, v in os.environ.items() if k not in (URL_VARIABLE, "PYTHONPATH")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"  # as an activated venv
    where = await _run([str(python), "-c", "import echomq; print(echomq.__file__)"], tmp_path, env)
    assert Path(where.strip()).is_relative_to(new_site), where  # the wheel's, not the tree's
    version = await _run(
        [str(python), "-c", "import echomq; print(echomq.__version__)"], tmp_path, env
    )
    assert version.strip() == echomq.__version__ == wheel.name.split("-")[1]
    cli = bin_dir / "echomq"
    if "--version" in await _run([str(cli), "--help"], tmp_path, env):  # the CLI's own flag
        assert echomq.__version__ in await _run([str(cli), "--version"], tmp_path, env)

    write_files(tmp_path)
    printed = [shlex.split(line, comments=True) for line in commands()]
    worker_words = next(w for w in printed if w[0] == "echomq")[:-1]  # less the "&"
    producer_words = next(w for w in printed if w[0] == "python")
    with RedisServer() as server:
        env[URL_VARIABLE] = server.url
        async with open_worker_process(
            worker_words[2],
            entry=[str(bin_dir / "echomq"), "worker"],  # the venv's console script
            env={URL_VARIABLE: server.url, "PATH": env["PATH"], "PYTHONPATH": None},
            cwd=tmp_path,
        ) as worker:
            out = await _run([str(python), *producer_words[1:]], tmp_path, env)
            assert out.strip() == "sent 'hi' to a@b.c"
            assert await worker.stop() == 0
    assert f"worker serving 'emails' at {parse_url(server.url).display}" in worker.output
