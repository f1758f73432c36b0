"""What real logs do to NCCL lines (NCCL spec section 4): tearing, collectors, cuts, old formats.

Lines are built from the spec's own examples (section 4 and the format strings it quotes),
so each test names the spec section it follows.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logsleuth.errors import InputError
from logsleuth.model.base import Event
from logsleuth.model.nccl import (
    NcclChannelConnect,
    NcclCollective,
    NcclConnected,
    NcclCudaDriver,
    NcclInfoNote,
    NcclInterface,
    NcclNetDevices,
    NcclNetwork,
    NcclProxyDump,
    NcclRing,
    NcclTree,
    NcclVersionRange,
    NcclWarn,
)
from logsleuth.parse.clean import strip_prefixes
from logsleuth.parse.discover import InputSource
from logsleuth.parse.dispatch import InputResult, read_input
from logsleuth.parse.numbering import detect_numbering


def read(text: str, keep_ops: int | None = None) -> InputResult:
    return read_input(InputSource(name="t.log", path=None, data=text.encode()), keep_ops)


def events_of(result: InputResult) -> list[Event]:
    return [e for e in result.events if not isinstance(e, NcclVersionRange)]


# ---------------------------------------------------------------- torn lines (spec 4.3)

TORN = (
    "gpu-a01:4721:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2"
    "gpu-a01:4722:4795 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
    "gpu-a01:4722:4795 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
    "P/CUMEM/read\n"
    "gpu-a01:4721:4790 [0] NCCL INFO Connected all rings\n"
)


def test_a_torn_line_is_split_and_its_tail_rejoined() -> None:
    # Spec 4.3: "…via P2gpu-a01:4722:4795 [1] NCCL INFO …", the tail "P/CUMEM/read" later.
    result = read(TORN)
    assert result.summary.lines == 4
    assert result.summary.recognized == 4 and result.summary.unrecognized == 0
    connects = [e for e in result.events if isinstance(e, NcclChannelConnect)]
    assert [(e.origin.pid, e.channel, e.transport, e.ref.line) for e in connects] == [
        (4722, 0, "P2P/CUMEM/read", 1),
        (4721, 0, "P2P/CUMEM/read", 1),
        (4722, 1, "P2P/CUMEM/read", 2),
    ]
    joined = connects[1]
    assert joined.text == (
        "gpu-a01:4721:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"
    )
    assert (joined.from_rank, joined.to_rank) == (0, 1)


def test_a_glued_host_name_is_cut_to_a_known_host() -> None:
    # The fragment ends in "P2", the next host is "gpu-a01": not "P2gpu-a01".
    events = events_of(read(TORN))
    assert {e.origin.host for e in events} == {"gpu-a01"}


def test_an_unjoined_head_is_read_as_far_as_it_goes() -> None:
    text = (
        "gpu-a01:4721:4790 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to"
        "gpu-a02:3310:3390 [0] NCCL INFO Using network IB\n"
        "gpu-a01:4723:4799 [0] NCCL INFO comm 0x55d0c8a1b2f0 rank 3 nranks 8 cudaDev 3 busId"
        "gpu-a02:3311:3391 [0] NCCL INFO Connected all rings\n"
    )
    result = read(text)
    events = events_of(result)
    # In line order; on one line the complete line comes first, the unjoined head after:
    # a WARN stays a WARN, a communicator line cut before its end is read as one.
    assert [type(e).__name__ for e in events] == [
        "NcclNetwork",
        "NcclWarn",
        "NcclConnected",
        "NcclInfoNote",
    ]
    _, warn, _, cut = events
    assert isinstance(warn, NcclWarn) and warn.origin.pid == 4721
    assert warn.message == "socketStartConnect: Connect to"
    assert isinstance(cut, NcclInfoNote) and cut.origin.pid == 4723
    assert cut.topic == "comm-truncated"
    # Both physical lines still carry a complete, recognized line.
    assert result.summary.recognized == 2


def test_two_lines_that_lost_the_break_between_them_are_both_read() -> None:
    # NCCL 2.3's whole communicator line, then another line glued to it: no tail follows,
    # the head is a message of its own (the catalog's), not a torn piece.
    text = (
        "v08:1707:1718 [0] NCCL INFO rank 0 nranks 2v08:1707:1719 [0] NCCL INFO rank 0 nranks 2\n"
    )
    result = read(text)
    assert [type(e).__name__ for e in events_of(result)] == ["LogMessage", "LogMessage"]
    assert result.summary.recognized == 1


def test_a_torn_line_behind_a_timestamp_keeps_the_timestamp() -> None:
    text = (
        "[2026-06-10 14:03:22] gpu-a01:4721:4790 [0] misc/socket.cc:484 NCCL WARN socketSt"
        "gpu-a02:3310:3390 [0] NCCL INFO Using network IB\n"
        "artConnect: Connect to 10.10.1.12<51237> failed : Connection refused\n"
    )
    events = events_of(read(text))
    warn = next(e for e in events if isinstance(e, NcclWarn))
    assert warn.family == "socket"
    assert warn.field("peer") == "10.10.1.12<51237>"
    assert warn.origin.time is not None
    assert any(isinstance(e, NcclNetwork) and e.origin.pid == 3310 for e in events)


def test_torn_coll_lines_rejoin_on_the_fast_path_too() -> None:
    coll = (
        "gpu-a01:{pid}:{pid} [0] NCCL INFO AllReduce: opCount {n:x} sendbuff 0x7f3a5c000000"
        " recvbuff 0x7f3a5c000000 count 1048576 datatype 7 op 0 root 0 comm 0x55d0c8a1b2f0"
        " [nranks=2] stream 0x55d0c9e04a10"
    )
    lines = [coll.format(pid=4721, n=n) for n in range(5)]
    other = coll.format(pid=4722, n=0)
    cut = len(lines[2]) // 2
    text = "\n".join([*lines[:2], lines[2][:cut] + other, *lines[3:], lines[2][cut:]]) + "\n"
    for keep in (None, 2):
        result = read(text, keep_ops=keep)
        assert result.summary.unrecognized == 0
        ops = sorted(
            (e.origin.pid, e.op_count) for e in result.events if isinstance(e, NcclCollective)
        )
        if keep is None:
            assert ops == [(4721, n) for n in range(5)] + [(4722, 0)]
        else:
            assert (4721, 2) in ops and (4722, 0) in ops


# ---------------------------------------------------------------- collectors (spec 4.2)


def test_pdsh_host_labels_are_stripped_when_the_file_carries_them() -> None:
    lines = [
        "gpu-a01: gpu-a01:4721:4721 [0] NCCL INFO Using network IB",
        "gpu-a02: gpu-a02:3310:3310 [0] NCCL INFO Using network IB",
        "gpu-a01: gpu-a01:4721:4721 [0] NCCL INFO Connected all rings",
        "gpu-a02: gpu-a02:3310:3310 [0] NCCL INFO Connected all rings",
        "gpu-a01: Traceback (most recent call last):",
        "gpu-a02: Traceback (most recent call last):",
        'gpu-a01:   File "train.py", line 3, in <module>',
        'gpu-a02:   File "train.py", line 3, in <module>',
    ]
    assert detect_numbering(lines) == "pdsh"
    text, hint = strip_prefixes(lines[4], "pdsh")
    assert text == "Traceback (most recent call last):"
    assert hint.host == "gpu-a01"
    # Exception lines "RuntimeError: ..." are words, not a few host labels.
    errors = [f"RuntimeError{i}: boom" for i in range(6)]
    assert detect_numbering(errors) is None
    assert detect_numbering([f"Epoch: {i} loss 0.5" for i in range(8)]) is None


def test_cloudwatch_kubectl_and_ray_prefixes() -> None:
    cases = [
        # aws logs tail: ISO time, log stream, message
        "2024-05-01T12:00:00.123000+00:00 trainer/pytorch/5f2c gpu-a01:1:1 [0] NCCL INFO x",
        # kubectl logs --prefix --timestamps
        "[pod/trainer-0/pytorch] 2024-05-01T12:00:00.123456789Z gpu-a01:1:1 [0] NCCL INFO x",
        # Ray worker with address
        "(RayWorkerWrapper pid=1019, ip=10.0.0.3) gpu-a01:1:1 [0] NCCL INFO x",
    ]
    for line in cases:
        text, _ = strip_prefixes(line)
        assert text == "gpu-a01:1:1 [0] NCCL INFO x", line
    assert strip_prefixes(cases[0])[1].time == 1714564800.123
    assert strip_prefixes(cases[2])[1].pid == 1019


def test_markdown_fences_and_quote_markers_from_issue_pastes() -> None:
    text = (
        "```text\n"
        "> gpu-a01:4721:4721 [0] NCCL INFO Using network IB\n"
        "> > gpu-a01:4721:4721 [0] NCCL INFO cudaDriverVersion 12040\n"
        "```\n"
    )
    result = read(text)
    assert result.summary.blank == 2 and result.summary.recognized == 2
    kinds = [type(e) for e in events_of(result)]
    assert kinds == [NcclNetwork, NcclCudaDriver]


# ---------------------------------------------------------------- 1023-byte cut (spec 1.5, 4.4)


def _cut(line: str, size: int = 1023) -> str:
    data = line.encode()
    assert len(data) > size
    return data[:size].decode()


def test_a_trees_line_cut_at_1023_bytes_drops_the_cut_channel() -> None:
    items = " ".join(f"[{c}] {c + 1}/-1/-1->{c}->{c - 1}" for c in range(64))
    line = _cut(f"gpu-a01:4721:4790 [0] NCCL INFO Trees {items}")
    (tree,) = events_of(read(line + "\n"))
    assert isinstance(tree, NcclTree) and tree.truncated
    whole = line.count("->") // 2
    assert len(tree.channels) == whole
    assert tree.channels[-1][0] == whole - 1


def test_a_ring_dump_and_an_ib_device_list_cut_at_1023_bytes() -> None:
    ring = _cut("gpu-a01:4721:4790 [0] NCCL INFO Channel 00/32 : " + " ".join(map(str, range(400))))
    devices = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(90))
    ib = _cut(f"gpu-a01:4721:4790 [0] NCCL INFO NET/IB : Using {devices} ; OOB eth0:10.0.0.1<0>")
    dump, nets = events_of(read(f"{ring}\n{ib}\n"))
    assert isinstance(dump, NcclRing) and dump.truncated
    assert dump.ranks == tuple(range(len(dump.ranks)))  # the cut last number is gone
    assert isinstance(nets, NcclNetDevices) and nets.truncated and nets.oob is None
    assert nets.devices[-1] == f"mlx5_{len(nets.devices) - 1}:1/IB"


def test_a_short_ring_dump_is_not_marked_cut() -> None:
    (dump,) = events_of(read("gpu-a01:4721:4790 [0] NCCL INFO Channel 00/02 :    0   1\n"))
    assert isinstance(dump, NcclRing) and not dump.truncated and dump.ranks == (0, 1)


# ---------------------------------------------------------------- older formats and WARNs


def test_the_old_format_without_the_word_nccl() -> None:
    # NCCL before 2.3 wrote "[dev] INFO" and "file:line WARN" (no "NCCL" before the level).
    text = (
        "gpu-a01:4721:4721 [0] INFO NET : Using interface eth0:10.0.0.1<0>\n"
        "gpu-a01:4721:4721 [0] misc/ibvwrap.cu:60 WARN Failed to open libibverbs.so[.1]\n"
        "gpu-a01:4721:4721 [0] INFO Using network Socket\n"
    )
    result = read(text)
    assert result.summary.recognized == 3
    iface, warn, network = events_of(result)
    assert isinstance(iface, NcclInterface) and iface.interfaces == (("eth0", "10.0.0.1<0>"),)
    assert isinstance(warn, NcclWarn) and (warn.file, warn.line_no) == ("misc/ibvwrap.cu", 60)
    assert isinstance(network, NcclNetwork) and network.name == "Socket"


def test_the_2_29_nvls_bind_warn_keeps_its_three_lines() -> None:
    # Spec 1.5: 2.29.2+ ends "Disable NVLS (NCCL_NVLS_ENABLE=0) ..." instead of "Do not force".
    text = (
        "\n"
        "[2026-01-10 10:00:00] gpu-a01:4721:4790 [0] transport/nvls.cc:228 NCCL WARN Failed to"
        " bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 801"
        " 'operation not supported'.\n"
        "This is usually caused by a system or configuration error in the Fabric Manager or"
        " NVSwitches.\n"
        "Disable NVLS (NCCL_NVLS_ENABLE=0) if you wish to avoid this error in the future.\n"
        "gpu-a01:4721:4790 [0] NCCL INFO Connected NVLS tree\n"
    )
    result = read(text)
    assert result.summary.unrecognized == 0 and result.summary.blank == 1
    warn, connected = events_of(result)
    assert isinstance(warn, NcclWarn) and warn.family == "cuda"
    assert warn.message.endswith("avoid this error in the future.")
    assert warn.message.count("\n") == 2
    assert isinstance(connected, NcclConnected)


def test_crlf_nul_ansi_and_invalid_utf8_in_one_file() -> None:
    data = (
        b"\x1b[32mgpu-a01:4721:4721 [0] NCCL INFO Using network IB\x1b[0m\r\n"
        b"gpu-a01:4721:4721 [0] NCCL INFO NET/Socket : Using eth\xff0:10.0.0.1<0>\x00\r\n"
    )
    result = read_input(InputSource(name="w.log", path=None, data=data))
    assert result.summary.recognized == 2
    network, iface = events_of(result)
    assert isinstance(network, NcclNetwork) and network.name == "IB"
    assert isinstance(iface, NcclInterface) and iface.interfaces[0][0] == "eth\ufffd0"


def test_an_empty_input_is_refused_not_raised_from_the_reader() -> None:
    try:
        read("")
    except InputError as exc:
        assert exc.reason == "file is empty"


# ---------------------------------------------------------------- properties


_WRITERS = [
    "gpu-a01:4721:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "gpu-a01:4722:4795 [1] NCCL INFO AllReduce: opCount 1a sendbuff 0x7f3a5c000000 recvbuff"
    " 0x7f3a5c000000 count 1048576 datatype 7 op 0 root 0 comm 0x55d0c8a1b2f0 [nranks=2]"
    " stream 0x55d0c9e04a10",
    "gpu-a02:3310:3390 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to"
    " 10.10.1.12<51237> failed : Connection refused",
    "[2026-06-10 14:03:22] gpu-a02:3311:3391 [0] NCCL INFO comm 0x55d0c8a1b2f0 rank 1 nranks 2"
    " cudaDev 1 busId 2a000 - Init COMPLETE",
]


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_WRITERS), st.integers(min_value=0, max_value=300)),
        min_size=1,
        max_size=12,
    ),
    st.integers(min_value=0, max_value=5000),
)
def test_lines_torn_anywhere_are_accounted_and_read_the_same_twice(
    pieces: list[tuple[str, int]], cut: int
) -> None:
    # Each writer's line is torn at a random point: its head glued to the next line, its
    # tail on a line of its own later (spec 4.3); then the file is cut at a random byte.
    physical: list[str] = []
    tails: list[str] = []
    for line, at in pieces:
        at = min(at, len(line))
        physical.append(line[:at])
        tails.append(line[at:])
    text = "".join(physical) + "\n" + "\n".join(tails) + "\n"
    data = text.encode()[: cut % (len(text) + 1) + 1]
    source = InputSource(name="torn.log", path=None, data=data)
    try:
        first = read_input(source)
    except InputError as exc:
        assert exc.reason == "file is empty"
        return
    s = first.summary
    assert s.recognized + s.unrecognized + s.blank == s.lines
    assert read_input(source) == first
    assert read_input(source, keep_ops=1).summary == s


# ---------------------------------------------------------------- proxy-state dump (spec 3.2)


def test_a_proxy_state_dump_becomes_one_event() -> None:
    # The spec 3.2 example, between two INFO lines; opCount is decimal in the dump.
    text = (
        "gpu-a01:4721:4790 [0] NCCL INFO Connected all rings\n"
        "ACTIVE OPS\n"
        "[0-3|26| Send 1S/0 1S/1]\n"
        "| `-> [0-4|26| Recv 15R/0 15R/1]\n"
        "|\n"
        "v\n"
        "[1-0|27| Coll 2/0]\n"
        "Elem 1-5 is not in any list:\n"
        "[X]\n"
        "gpu-a01:4721:4790 [0] NCCL INFO Connected all trees\n"
    )
    result = read(text)
    assert result.summary.recognized == 10
    (dump,) = [e for e in result.events if isinstance(e, NcclProxyDump)]
    assert dump.ref.line == 2 and dump.complete
    assert dump.ops == (
        (0, 3, 26, "Send", ((1, "S", 0), (1, "S", 1))),
        (0, 4, 26, "Recv", ((15, "R", 0), (15, "R", 1))),
        (1, 0, 27, "Coll", ((2, None, 0),)),
    )
    assert dump.chained == (False, True, False)
    assert dump.leaks == ("1-5",)


def test_the_spec_example_with_hex_digits_in_the_op_count_is_read() -> None:
    # The format is "%ld", but the spec's own example prints "1a": such a dump is still read.
    result = read("ACTIVE OPS\n[0-3|1a| Send 1S/0 1S/1]\n| `-> [0-4|1a| Recv 15R/0 15R/1]\n[X]\n")
    (dump,) = [e for e in result.events if isinstance(e, NcclProxyDump)]
    assert [op[2] for op in dump.ops] == [0x1A, 0x1A] and dump.complete


def test_a_dump_cut_short_is_marked_incomplete_and_v_alone_is_foreign() -> None:
    result = read("ACTIVE OPS\n[0-3|26| Send 1S/0]\nTraceback (most recent call last):\n")
    (dump,) = [e for e in result.events if isinstance(e, NcclProxyDump)]
    assert not dump.complete and len(dump.ops) == 1
    assert read("v\n|\n").summary.recognized == 0
