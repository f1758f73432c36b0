"""Correlation across sources: addresses to hosts, own deaths, process groups, host clocks."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from benchmarks.synth import generate
from logsleuth.analysis.correlate import (
    address_hosts,
    clock_offsets,
    first_errors,
    host_of_peer,
    own_deaths,
    pg_links,
)
from logsleuth.analysis.index import KEEP_OPS, EvidenceIndex, build_index
from logsleuth.analysis.overview import build_timeline
from logsleuth.model.base import Event
from logsleuth.model.torch import WatchdogTimeout
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_inputs

_GLOG = re.compile(r"^\[rank(\d+)\]:\[E(\d{3,4}) (\d\d:\d\d:\d\d\.\d{6})")


def _index(path: Path) -> EvidenceIndex:
    sources, _problems = discover([str(path)])
    events: list[Event] = []
    for result in read_inputs(sources, keep_ops=KEEP_OPS):
        assert not isinstance(result, Exception)
        events.extend(result.events)
    return build_index(events)


def test_ib_peer_addresses_resolve_to_the_dead_ranks_host(tmp_path: Path) -> None:
    generate(tmp_path, ranks=8, hosts=2, ops=24, fault="process-died", culprit=5, launcher=True)
    index = _index(tmp_path)
    assert address_hosts(index) == {"10.42.0.11": "gpu-node001", "10.42.0.12": "gpu-node002"}
    assert host_of_peer(index, "10.42.0.12<58979>") == "gpu-node002"
    assert host_of_peer(index, "192.168.1.1<1>") is None
    deaths = own_deaths(index)
    # SIGTERMed siblings and watchdog aborts are aftermath; only the SIGKILL is a death.
    assert [(d.rank, d.host, d.how) for d in deaths] == [(5, "gpu-node002", "signal SIGKILL")]


def test_an_exit_code_is_a_death_and_torchruns_sigterm_is_not(tmp_path: Path) -> None:
    generate(tmp_path, ranks=8, hosts=2, ops=24, fault="exception", culprit=6, launcher=True)
    index = _index(tmp_path)
    assert [(d.rank, d.how) for d in own_deaths(index)] == [(6, "exit code 1")]
    first = first_errors(index)
    # The traceback of rank 6 is the first error in time; the timeouts come 10 minutes later.
    assert first[0].rank == 6
    assert [f.rank for f in first[1:]] and all(f.time - first[0].time > 590 for f in first[1:])


def test_the_watchdogs_seqnum_is_ncclss_opcount_plus_one(tmp_path: Path) -> None:
    generate(
        tmp_path, ranks=12, hosts=3, ops=24, fault="missing-collective", culprit=7, launcher=True
    )
    links = pg_links(_index(tmp_path))
    assert len(links) == 1
    assert (links[0].pg, links[0].offset) == ("0", 1)
    # The culprit's watchdog never fired (it never enqueued the collective): not counted.
    assert links[0].ranks == (0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11)


def test_no_link_without_the_watchdogs_counters(tmp_path: Path) -> None:
    generate(tmp_path, ranks=8, hosts=2, ops=24, fault="missing-collective", culprit=3)
    assert pg_links(_index(tmp_path)) == []


def _shift_host(launcher: Path, ranks: set[int], seconds: float) -> None:
    """Move the glog times of ``ranks`` by ``seconds``, as a host with a skewed clock would."""
    lines = launcher.read_text().split("\n")
    for no, line in enumerate(lines):
        m = _GLOG.match(line)
        if m and int(m.group(1)) in ranks:
            mmdd = m.group(2).zfill(4)
            stamp = datetime.strptime(f"{mmdd} {m.group(3)}", "%m%d %H:%M:%S.%f")
            moved = stamp + timedelta(seconds=seconds)
            text = f"{moved.month}{moved.day:02d} {moved:%H:%M:%S.%f}"
            lines[no] = line[: m.start(2)] + text + line[m.end(3) :]
    launcher.write_text("\n".join(lines))


def test_a_skewed_host_clock_is_measured_and_corrected(tmp_path: Path) -> None:
    generate(
        tmp_path, ranks=12, hosts=3, ops=24, fault="missing-collective", culprit=7, launcher=True
    )
    _shift_host(tmp_path / "launcher.log", {8, 9, 10, 11}, 7.0)
    index = _index(tmp_path)
    offsets = clock_offsets(index)
    assert offsets["gpu-node001"] == pytest.approx(0.0, abs=0.1)
    assert offsets["gpu-node002"] == pytest.approx(0.0, abs=0.1)
    assert offsets["gpu-node003"] == pytest.approx(7.0, abs=0.1)
    # Corrected, the timeouts of all hosts fall within a fraction of a second again (only
    # the glog lines were moved here, so only the timeouts are compared).
    times = [f.time for f in first_errors(index) if isinstance(f.event, WatchdogTimeout)]
    assert len(times) >= 8
    assert max(times) - min(times) < 0.5
    raw = [e.origin.time or 0.0 for e in index.torch if isinstance(e, WatchdogTimeout)]
    assert max(raw) - min(raw) > 6.5


def test_one_host_has_no_clock_to_compare_with(tmp_path: Path) -> None:
    generate(
        tmp_path, ranks=4, hosts=1, ops=24, fault="missing-collective", culprit=2, launcher=True
    )
    assert clock_offsets(_index(tmp_path)) == {}


def test_the_report_timeline_orders_first_errors_on_the_aligned_clock(tmp_path: Path) -> None:
    generate(
        tmp_path, ranks=12, hosts=3, ops=24, fault="missing-collective", culprit=7, launcher=True
    )
    # gpu-node003's clock runs 7 s behind: its timeouts look earliest as logged.
    _shift_host(tmp_path / "launcher.log", {8, 9, 10, 11}, -7.0)
    index = _index(tmp_path)
    assert clock_offsets(index)["gpu-node003"] == pytest.approx(-7.0, abs=0.1)
    (timeouts,) = [e for e in build_timeline(index) if "Watchdog caught" in e.message]
    raw_first = min(
        (e for e in index.torch if isinstance(e, WatchdogTimeout)),
        key=lambda e: e.origin.time or 0.0,
    )
    assert raw_first.origin.rank in {8, 9, 10, 11}
    assert timeouts.evidence is not None
    assert timeouts.evidence.line != raw_first.ref.line
