"""The wheel installs with pip into a fresh virtual environment under its own name.

Offline-friendly: the wheel is installed with ``--no-index --no-deps``; the fresh venv sees
the runtime dependencies through a ``.pth`` line naming this environment's site-packages
(such a line adds a path, it does not run this environment's editable-install hooks, so
``import logsleuth`` can only come from the wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from logsleuth import __version__

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "nccl-logsleuth"
BUNDLE = ROOT / "fixtures" / "real" / "live" / "size-mismatch"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the bin/ directory of a fresh venv with the wheel installed."""
    work = tmp_path_factory.mktemp("install")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = work.glob("nccl_logsleuth-*.whl")
    metadata = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("/METADATA"))
    assert f"Name: {DISTRIBUTION}\n" in zipfile.ZipFile(wheel).read(metadata).decode()
    target = work / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    python = target / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "outer-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return target / "bin"


def _run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(cwd)}
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )


def test_installed_under_its_own_name(installed: Path, tmp_path: Path) -> None:
    shown = _run(installed, "python", "-m", "pip", "show", DISTRIBUTION, cwd=tmp_path)
    assert shown.returncode == 0 and f"Name: {DISTRIBUTION}" in shown.stdout, shown.stderr
    assert f"Version: {__version__}\n" in shown.stdout
    where = _run(
        installed, "python", "-c", "import logsleuth; print(logsleuth.__file__)", cwd=tmp_path
    )
    assert where.stdout.startswith(str(installed.parent)), where.stdout


def test_the_logsleuth_command_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    version = _run(installed, "logsleuth", "--version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"logsleuth {__version__}\n"
    analysed = _run(
        installed,
        "logsleuth",
        "analyze",
        str(BUNDLE),
        "--json",
        "out.json",
        "--quiet",
        cwd=tmp_path,
    )
    assert analysed.returncode == 1, analysed.stderr
    assert analysed.stdout.startswith("collective-mismatch: ")
    assert json.loads((tmp_path / "out.json").read_text())["schema"] == "logsleuth.diagnosis/1"
    schema = _run(installed, "logsleuth", "schema", cwd=tmp_path)
    assert json.loads(schema.stdout)["title"] == "logsleuth.diagnosis/1"
