"""NCCL release ranges inferred from line shapes (NCCL spec section 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.analysis.index import build_index
from logsleuth.model.base import Event
from logsleuth.model.nccl import NcclVersionRange, NcclWarn
from logsleuth.parse.base import Line, Sink
from logsleuth.parse.clean import strip_prefixes
from logsleuth.parse.fingerprint import message_features, parse_version
from logsleuth.parse.nccl import NcclReader
from logsleuth.parse.numbering import detect_numbering

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "nccl"


def read_lines(lines: list[str], name: str = "x.log") -> list[Event]:
    """Feed ``lines`` through prefix stripping and the reader, as the dispatcher does."""
    numbering = detect_numbering(lines)
    reader, sink = NcclReader(name), Sink()
    for number, raw in enumerate(lines, start=1):
        text, hint = strip_prefixes(raw, numbering)
        if text.strip():
            reader.feed(Line(number, text, raw, hint), sink)
    reader.close(sink)
    return sink.events


def ranges(events: list[Event]) -> dict[tuple[str | None, int | None], NcclVersionRange]:
    return {(e.origin.host, e.origin.pid): e for e in events if isinstance(e, NcclVersionRange)}


def within(version: str, found: NcclVersionRange) -> bool:
    exact = parse_version(version)
    assert exact is not None
    low = parse_version(found.low) if found.low else (0, 0, 0)
    high = parse_version(found.high) if found.high else (99, 0, 0)
    assert low is not None and high is not None
    return low <= exact <= high


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("version_2_14_fastsocket_node1.log", "2.14.3"),
        ("version_2_19_socket_node2.log", "2.19.3"),
        ("rtx4090_shm_rings_2_26.log", "2.26.5"),
        ("rtx4090_header_2_26.log", "2.26.5"),
    ],
)
def test_real_logs_without_their_version_line_fall_in_a_range_holding_it(
    name: str, version: str
) -> None:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    shapes_only = [line for line in lines if "NCCL version" not in line]
    found = ranges(read_lines(shapes_only))
    assert found, "no stream showed a release-specific line"
    for stream in found.values():
        assert not stream.exact
        assert within(version, stream), (stream.low, stream.high, stream.evidence)


def test_roce_channels_are_narrowed_to_2_18_3_or_newer() -> None:
    # corpus 007 (NVIDIA/nccl#1814): "Channel 00/0 : 36[4] -> 37[5] via P2P/CUMEM/read".
    lines = (FIXTURES / "roce_p2p_cumem_channels.log").read_text(encoding="utf-8").splitlines()
    found = ranges(read_lines(lines))
    assert len(found) == 4
    for stream in found.values():
        assert (stream.low, stream.high) == ("2.18.3", "")
        assert "transport-nvmldev" in [feature for feature, _ in stream.evidence]


def test_a_version_line_pins_the_range() -> None:
    events = read_lines(
        [
            "gpu-a01:4721:4721 [0] NCCL INFO cudaDriverVersion 12040",
            "gpu-a01:4721:4721 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        ]
    )
    (stream,) = ranges(events).values()
    assert (stream.low, stream.high, stream.exact) == ("2.21.5", "2.21.5", True)
    assert [f for f, _ in stream.evidence] == ["cuda-driver", "version-line"]
    assert stream.ref.line == 1


@pytest.mark.parametrize(
    ("message", "low", "high"),
    [
        # Spec 5, one line per feature, built from the format strings of spec 2.x.
        ("NCCL git version master 1a2b3c", "2.29.2", ""),
        (
            "[Rank 0] ncclCommInitRankConfig comm 0x55d0c8a1b2f0 rank 0 nranks 16 cudaDev 0"
            " nvmlDev 0 busId 18000 commId 0x9f3c2b1a7e6d5c4b - Init START",
            "2.29.2",
            "",
        ),
        ("ncclTopoGetCpuAffinity: Affinity for GPU 0 is 0-23,96-119.", "2.28.3", ""),
        ("Assigned NET plugin IB to comm", "2.27.3", ""),
        ("Bootstrap: Using eth0:10.10.1.11<0>", "2.24.3", ""),
        ("Connected binomial trees", "2.23.4", ""),
        ("Channel 00/24 :  0  1  2  3", "2.23.4", ""),
        ("GPU/0-18000 :GPU/0-18000 (0/5000.0/LOC) CPU/0-0 (1/48.0/PHB)", "2.21.5", ""),
        ("32 coll channels, 32 collnet channels, 0 nvls channels", "2.20.3", ""),
        ("Channel 00/0 : 0[18000] -> 1[2a000] via P2P/IPC", "2.5.6", "2.18.1"),
        ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "2.18.3", ""),
        ("threadThresholds 8/8/64 | 128/8/64 | 512 | 512", "2.14.3", ""),
        ("cudaDriverVersion 12040", "2.13.4", ""),
        ("Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA", "2.18.3", ""),
        ("Channel 00/0 : 1[2a000] -> 0[18000] [send] via NET/IB/0/GDRDMA", "2.12.7", "2.18.1"),
        ("Channel 00 : 1[2a000] -> 0[18000] [send] via NET/IB/0", "2.7.3", "2.11.4"),
        ("Ring 00 : 1 -> 0 [receive] via NET/Socket/0", "2.3.5", "2.6.4"),
        ("Ring 00 : 0[17000] -> 1[65000] via P2P/IPC", "2.5.6", "2.6.4"),
        ("Bootstrap : Using [0]eth0:10.10.1.11<0>", "2.4.8", "2.7.8"),
        ("Channel 01 : 0[0] -> 1[1] via SHM/direct/direct", "2.18.3", "2.30.4"),
        ("Channel 00 : 0[7000] -> 1[b000] via SHM/direct/direct", "2.5.6", "2.18.1"),
        ("Channel 00 : 0[0] -> 1[1] via SHM/direct", "2.30.7", ""),
        ("Connected all rings, use ring PXN 0 GDR 1", "2.24.3", ""),
        (
            "opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 size 32 datatype 7 op 0 comm 0x5"
            " [nranks=2] stream 0x6",
            "2.3.5",
            "2.3.5",
        ),
    ],
)
def test_each_spec_feature_narrows_to_its_releases(message: str, low: str, high: str) -> None:
    events = read_lines([f"gpu-a01:4721:4790 [0] NCCL INFO {message}"])
    (stream,) = ranges(events).values()
    assert (stream.low, stream.high) == (low, high)


def test_prefix_features_warn_func_timestamp_call_and_old_format() -> None:
    cases = {
        # 2.30.7: WARN "file:line (func)"
        "gpu-a01:1:1 [0] os/linux.cc:288 (socketConnectCheck) NCCL WARN x": ("2.30.7", ""),
        # 2.26.2+: default "[%F %T] " before a WARN
        "[2026-06-10 14:03:22] gpu-a01:2:2 [0] misc/socket.cc:484 NCCL WARN x": ("2.26.2", ""),
        "gpu-a01:3:3 NCCL CALL ncclAllReduce(7f3a,7f3a,1048576,7,0,0,0x55,0x55)": ("2.13.4", ""),
        # before 2.3: no "NCCL" before the level
        "gpu-a01:4:4 [0] misc/ibvwrap.cu:60 WARN Failed to open libibverbs.so[.1]": ("", "2.2.99"),
    }
    found = ranges(read_lines(list(cases)))
    assert {pid: (r.low, r.high) for (_, pid), r in found.items()} == {
        1: cases[next(iter(cases))],
        2: ("2.26.2", ""),
        3: ("2.13.4", ""),
        4: ("", "2.2.99"),
    }


def test_contradicting_features_keep_the_first_range() -> None:
    events = read_lines(
        [
            "gpu-a01:4721:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "gpu-a01:4721:4790 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/Socket/0",
        ]
    )
    (stream,) = ranges(events).values()
    assert (stream.low, stream.high) == ("2.18.3", "")
    assert [line for _, line in stream.evidence] == [1, 1]  # line 2 narrowed nothing


def test_2_26_warn_timestamps_lose_their_wrong_sub_second_digits() -> None:
    # Spec 1.4: 2.26.x computed %Nf from microseconds; the digits are wrong, keep seconds.
    events = read_lines(
        [
            "gpu-a01:4721:4721 [0] NCCL INFO NCCL version 2.26.2+cuda12.8",
            "[2025-03-14 09:26:53.042] gpu-a01:4721:4721 [0] misc/socket.cc:484 NCCL WARN x",
        ]
    )
    warn = next(e for e in events if isinstance(e, NcclWarn))
    assert warn.origin.time is not None and warn.origin.time == int(warn.origin.time)
    newer = read_lines(
        [
            "gpu-a01:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
            "[2025-03-14 09:26:53.042] gpu-a01:1:1 [0] misc/socket.cc:484 NCCL WARN x",
        ]
    )
    warn = next(e for e in newer if isinstance(e, NcclWarn))
    assert warn.origin.time is not None and round(warn.origin.time % 1, 3) == 0.042


def test_lines_of_every_release_have_no_features() -> None:
    assert message_features("Using network IB") == []
    assert message_features("Connected all rings") == []


def test_the_index_answers_release_questions_from_the_range() -> None:
    events = read_lines(
        ["gpu-a01:4721:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"]
    )
    proc = build_index(events).procs[("gpu-a01", 4721)]
    assert proc.nccl_version is None and proc.nccl_range == ("2.18.3", "")
    # The [x] field of transport lines is the nvmlDev from 2.18.3 on (spec 2.8).
    assert proc.runs_nccl("2.18.3", "") is True
    assert proc.runs_nccl("2.5.6", "2.18.1") is False
    assert proc.runs_nccl("2.27.3", "") is None


def test_the_split_feature_scan_finds_what_one_search_finds() -> None:
    """message_features matches the anchored features at position 0 and searches only the
    others later in the line: the leftmost feature must be the one a single search finds."""
    from logsleuth.parse import fingerprint

    messages = [
        "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "Bootstrap: Using eth0:10.0.0.1<0> splitCount 2",
        "x via SHM/direct/direct childCount 3",
        "Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1 GPU/0-1b000",
        "comm 0x1 rank 0 nranks 8 commId 0xabc - Init START",
    ]
    for path in sorted(FIXTURES.rglob("*.log"))[:40]:
        for line in path.read_text(errors="replace").splitlines():
            if " NCCL INFO " in line:
                messages.append(line.split(" NCCL INFO ", 1)[1])
    assert len(messages) > 100
    names = {name for name, _, _, _ in fingerprint._FEATURES}
    for message in messages:
        one = fingerprint._SCAN.search(message)
        expected = (
            fingerprint._FEATURES[int(one.lastgroup[1:])][0] if one and one.lastgroup else None
        )
        found = [n for n, _, _ in message_features(message) if n in names]
        assert (found[0] if found else None) == expected, message
    # The literal pre-check covers every feature that may start later in a line.
    assert fingerprint._LATER_HINT is not None
    assert all(fingerprint._LEADS)
