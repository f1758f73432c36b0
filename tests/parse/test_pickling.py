"""Events pickle to the same objects with the fast state, and load across both state forms."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

from benchmarks.synth import generate
from logsleuth.model.base import Origin, SourceRef
from logsleuth.model.nccl import NcclChannelConnect
from logsleuth.parse import pickling
from logsleuth.parse.discover import discover
from logsleuth.parse.dispatch import read_inputs


def test_every_event_of_a_bundle_survives_a_pickle_round_trip(tmp_path: Path) -> None:
    generate(
        tmp_path / "job",
        ranks=8,
        hosts=2,
        ops=30,
        fault="process-died",
        comms=3,
        launcher=True,
        stacks=True,
    )
    sources, _ = discover([str(tmp_path / "job")])
    results = list(read_inputs(sources, jobs=1))
    events = [e for r in results for e in r.events]
    assert len({type(e) for e in events}) > 8
    assert pickle.loads(pickle.dumps(results)) == results


def test_the_fast_state_loads_into_the_generated_one_and_back() -> None:
    pickling.install()
    event = NcclChannelConnect(
        ref=SourceRef("nccl/a.log", 7),
        text="a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        origin=Origin(host="a", pid=1, tid=2, dev=0),
        channel=0,
        from_rank=0,
        to_rank=1,
        transport="P2P/CUMEM",
    )
    fast = event.__getstate__()  # type: ignore[attr-defined]
    assert isinstance(fast, tuple)
    assert list(fast) == [getattr(event, f.name) for f in dataclasses.fields(event)]
    # The state a worker without the fast state sends (a list) loads, and vice versa.
    blank = object.__new__(NcclChannelConnect)
    blank.__setstate__([getattr(event, f.name) for f in dataclasses.fields(event)])  # type: ignore[attr-defined]
    assert blank == event
    assert pickle.loads(pickle.dumps(event, protocol=pickle.HIGHEST_PROTOCOL)) == event
