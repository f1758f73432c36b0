"""``logsleuth live`` on real 4-rank torch gloo jobs: every built-in repro scenario.

Each scenario runs once (module cache) through the real command line; size-mismatch runs
with every rank as the culprit, as the rank that detects the mismatch (and aborts) moves with
it. Two tests per run: the bundle and the clean-up, and the verdict.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from logsleuth.cli import main
from logsleuth.live.procs import is_alive
from tests.live.helpers import job_survivors

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None,
        reason="torch is not installed (pip install 'nccl-logsleuth[live]')",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
STALL_TIMEOUT = 8
NPROC = 4
_STEP_TIME = re.compile(r"^repro: rank \d+: .* \(t=(\d+\.\d+)\)$", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    name: str
    culprit: int
    hangs: bool
    kinds: tuple[str, ...]
    """Verdict kinds a correct diagnosis may give."""

    @property
    def id(self) -> str:
        return f"{self.name}-culprit{self.culprit}" if self.name == "size-mismatch" else self.name


CASES = (
    Case("healthy", 1, False, ("healthy",)),
    Case(
        "skip-collective",
        1,
        True,
        ("missing-collective",),
    ),
    Case(
        "order-mismatch",
        1,
        True,
        ("collective-mismatch", "missing-collective"),
    ),
    *(Case("size-mismatch", culprit, False, ("collective-mismatch",)) for culprit in range(NPROC)),
    Case("exception", 2, False, ("process-died",)),
    Case(
        "early-exit",
        1,
        False,
        ("process-died", "missing-collective"),
    ),
    Case("dataloader-stall", 2, True, ("non-collective-stall",)),
    Case(
        "init-never",
        3,
        True,
        ("init-stall",),
    ),
)


@dataclass(frozen=True)
class Run:
    out: Path
    returncode: int
    seconds: float
    stdout: str
    stderr: str


_RUNS: dict[str, Run] = {}


def _run(case: Case, tmp_root: Path) -> Run:
    if case.id not in _RUNS:
        out = tmp_root / case.id
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable, "-m", "logsleuth", "repro", "run", case.name, "--live",
                "--nproc", str(NPROC), "--backend", "gloo", "--culprit", str(case.culprit),
                "--out", str(out), "--stall-timeout", str(STALL_TIMEOUT),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(tmp_root)},
            timeout=300,
            check=False,
        )  # fmt: skip
        _RUNS[case.id] = Run(
            out, done.returncode, time.monotonic() - started, done.stdout, done.stderr
        )
    return _RUNS[case.id]


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("live")


def _json(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bundle_is_complete_and_no_process_survives(
    case: Case, tmp_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(case, tmp_root)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    manifest = _json(run.out / "manifest.json")
    ranks = manifest["ranks"]
    assert isinstance(ranks, dict) and sorted(ranks) == ["0", "1", "2", "3"]
    assert [ranks[str(r)]["local_rank"] for r in range(NPROC)] == [0, 1, 2, 3]
    assert all(not is_alive(r["pid"]) for r in ranks.values())
    assert job_survivors(run.out) == []
    # The brief report ends the output: the pointer to the full report, the verdict last.
    lines = run.stdout.splitlines()
    assert lines[-2] == f"full report: {run.out / 'report.html'}"
    assert lines[-1].startswith("VERDICT ")
    assert (run.out / "report.html").read_text().startswith("<!DOCTYPE html>")
    log = (run.out / "launcher.log").read_text()
    if case.hangs:
        assert manifest["stalled_at"] is not None
        stalled = datetime.fromisoformat(str(manifest["stalled_at"])).timestamp()
        last_step = max(float(t) for t in _STEP_TIME.findall(log))
        assert stalled - last_step <= STALL_TIMEOUT + 15
        stacks = sorted(p.name for p in (run.out / "stacks").iterdir())
        assert stacks == [f"rank{r}.{n}.txt" for r in range(NPROC) for n in (1, 2)]
    else:
        assert manifest["stalled_at"] is None
        assert not (run.out / "stacks").exists()
    if case.name == "size-mismatch":
        # One rank aborts in gloo's size check; the others dump their flight recorders, on
        # "Connection reset by peer" or on torchrun's SIGTERM. On a loaded machine torchrun's
        # SIGKILL may come before one of them finished writing: one may be missing, never the
        # culprit's (which raised first).
        dumps = sorted(p.name for p in (run.out / "fr").iterdir())
        assert NPROC - 2 <= len(dumps) <= NPROC - 1, dumps
        assert f"rank_{case.culprit}" in dumps, dumps
    if case.name == "healthy":
        assert run.returncode == 0
        assert sorted(re.findall(r"^repro: rank (\d): finished", log, re.MULTILINE)) == [
            "0", "1", "2", "3",
        ]  # fmt: skip
    # The bundle re-analysed later gives the same diagnosis, byte for byte.
    capsys.readouterr()
    assert main(["analyze", str(run.out), "--json", "-"]) == run.returncode
    assert capsys.readouterr().out == (run.out / "diagnosis.json").read_text()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verdict_names_the_fault_and_the_culprit(case: Case, tmp_root: Path) -> None:
    run = _run(case, tmp_root)
    verdict = _json(run.out / "diagnosis.json")["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["kind"] in case.kinds, verdict
    expected = [] if case.name == "healthy" else [case.culprit]
    assert verdict["culprit_ranks"] == expected, verdict
    assert run.returncode == (0 if case.name == "healthy" else 1)
