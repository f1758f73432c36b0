"""Connection lines read as runs (NcclConnectRun rows) diagnose exactly as line events do.

Workers send runs of connection lines as rows, and the index and the topology read the rows
without making an event per line. Expanding every run into its NcclChannelConnect events
before the analysis must give the same diagnosis, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.synth import generate
from logsleuth import api
from logsleuth.model.nccl import NcclConnectRun
from logsleuth.parse.dispatch import InputResult, expand_runs
from logsleuth.report.json import render_json

ROOT = Path(__file__).resolve().parents[2]


def _json(paths: list[str]) -> str:
    return render_json(api.analyze(paths).diagnosis)


@pytest.mark.parametrize(
    ("fault", "extra"),
    [
        ("missing-collective", {"comms": 2}),
        ("socket-fallback", {}),
        ("early-exit", {}),
    ],
)
def test_runs_and_their_events_give_one_diagnosis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, extra: dict[str, int]
) -> None:
    generate(tmp_path, ranks=16, hosts=2, ops=20, fault=fault, launcher=True, **extra)
    read_inputs = api.read_inputs
    seen: list[int] = []

    def counted(*args: object, **kwargs: object) -> Iterator[object]:
        for result in read_inputs(*args, **kwargs):  # type: ignore[arg-type]
            if isinstance(result, InputResult):
                seen.append(sum(isinstance(e, NcclConnectRun) for e in result.events))
            yield result

    monkeypatch.setattr(api, "read_inputs", counted)
    as_rows = _json([str(tmp_path)])
    assert sum(seen) > 0, "the fast lane made no run"

    def expanded(*args: object, **kwargs: object) -> Iterator[object]:
        for result in read_inputs(*args, **kwargs):  # type: ignore[arg-type]
            yield expand_runs(result) if isinstance(result, InputResult) else result

    monkeypatch.setattr(api, "read_inputs", expanded)
    assert _json([str(tmp_path)]) == as_rows


def test_real_nccl_fixtures_diagnose_the_same_as_rows_and_as_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_inputs = api.read_inputs

    def expanded(*args: object, **kwargs: object) -> Iterator[object]:
        for result in read_inputs(*args, **kwargs):  # type: ignore[arg-type]
            yield expand_runs(result) if isinstance(result, InputResult) else result

    incidents = sorted((ROOT / "fixtures" / "real" / "nccl").glob("*.log"))
    assert len(incidents) > 5
    for incident in incidents:
        monkeypatch.setattr(api, "read_inputs", read_inputs)
        as_rows = _json([str(incident)])
        monkeypatch.setattr(api, "read_inputs", expanded)
        assert _json([str(incident)]) == as_rows, incident
