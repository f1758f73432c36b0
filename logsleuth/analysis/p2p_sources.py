"""Point-to-point ops from every source that has them: stacks, proxy dumps, flight recorder.

Each ``*_ops`` function reads one kind of evidence and returns the :class:`P2POp` it shows,
pending or done; :mod:`logsleuth.analysis.p2p` matches them across ranks.

* stacks taken with the call's arguments (``py-spy dump --locals``): a rank blocked in
  ``send``/``recv``/``isend``/``irecv`` shows its peer (``dst``/``src``, else
  ``group_dst``/``group_src`` of the default group) and ``tag``;
* NCCL proxy-state dumps (``NCCL_PROXY_DUMP_SIGNAL``, spec 3.2): every active Send/Recv
  with its opCount and, per channel, the peer and the status letter;
* flight-recorder entries of point-to-point ops (``nccl:send 0->1``, ``gloo:recv 1<-0``)
  with their ``p2p_seq_id`` and state.
"""

from __future__ import annotations

import re

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.stacks import ProcStack
from logsleuth.model.diagnosis import Evidence
from logsleuth.model.flight import FlightRecorderDump
from logsleuth.model.nccl import NcclProxyDump
from logsleuth.model.p2p import P2POp
from logsleuth.model.stacks import Frame, StackDump

P2P_CALLS = {"send": "send", "recv": "recv", "isend": "send", "irecv": "recv"}
"""torch.distributed point-to-point calls and the direction each posts."""
_PROXY_STATUS = {
    "I": "init",
    "S": "sending",
    "R": "receiving",
    "F": "flushing",
    "G": "waiting-gpu",
    "D": "done",
    None: "posted",
}
_FR_NAME = re.compile(r"\b(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")
"""``nccl:send 0->1`` (rank 0 sends to 1), ``nccl:recv 1<-0`` (rank 1 receives from 0)."""
_PENDING_FR = ("scheduled", "started")


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _user_site(frames: tuple[Frame, ...], start: int) -> str:
    """Return ``func (file:line)`` of the first frame at or after ``start`` outside torch."""
    for frame in frames[start:]:
        file = frame.file or ""
        if "/torch/" in file or file.startswith("torch/") or "site-packages" in file:
            continue
        name = file.rsplit("/", 1)[-1]
        return f"{frame.func} ({name}:{frame.line})" if frame.line else f"{frame.func} ({name})"
    return ""


def stack_op(rank: int, dump: StackDump) -> P2POp | None:
    """Return the send/recv the main thread of ``dump`` is blocked in, with its peer.

    Only a call whose frame lists its arguments (``--locals``) names the peer; without
    them the op is still returned, with ``peer`` None, so the rank counts as in a P2P call.
    """
    thread = dump.main_thread()
    if thread is None:
        return None
    for position, frame in enumerate(thread.frames):
        op = P2P_CALLS.get(frame.func.rsplit(".", 1)[-1])
        if op is None or "distributed_c10d" not in (frame.file or ""):
            continue
        args = dict(frame.locals)
        key = "dst" if op == "send" else "src"
        peer = _int(args.get(key))
        if peer is None and args.get("group", "None") == "None":
            peer = _int(args.get(f"group_{key}"))
        site = _user_site(thread.frames, position + 1)
        call = frame.func.rsplit(".", 1)[-1]
        quote = dump.quote(frame)
        return P2POp(
            rank=rank,
            op=op,
            peer=peer,
            tag=_int(args.get("tag")),
            where=f"{call} at {site}" if site else call,
            source="stacks",
            evidence=quote
            if quote is not None
            else Evidence(dump.ref.source, dump.ref.line, dump.text),
        )
    return None


def stack_ops(procs: list[ProcStack]) -> list[P2POp]:
    """Return the point-to-point op of each rank blocked in one (stuck, not moving)."""
    found: list[P2POp] = []
    for proc in procs:
        if proc.rank is None or proc.moved:
            continue
        op = stack_op(proc.rank, proc.dump)
        if op is not None and op.peer is not None:
            found.append(op)
    return found


def last_proxy_dumps(index: EvidenceIndex) -> dict[int, NcclProxyDump]:
    """Return the last proxy-state dump of each rank that printed one.

    A dump's peers are ranks of communicators it does not name (:func:`proxy_ops`). A
    process that the NCCL logs show in communicators of more than one size (torch's
    two-rank send/recv communicators beside the world's) numbers its peers in several ways:
    its dump says nothing about global ranks and is left out.
    """
    sizes: dict[tuple[str | None, int | None], set[int | None]] = {}
    for state in index.comms.values():
        for stream in state.members:
            sizes.setdefault(stream, set()).add(state.nranks)
    last: dict[int, NcclProxyDump] = {}
    for dump in index.all_of(NcclProxyDump):
        rank = dump.origin.rank
        if rank is None:
            rank = index.rank_of(dump.origin.host, dump.origin.pid)
        stream = (dump.origin.host, dump.origin.pid)
        if rank is not None and stream[1] is None:
            proc = index.proc_of_rank(rank)
            stream = (proc.host, proc.pid) if proc is not None else stream
        if len(sizes.get(stream, ())) > 1:
            continue
        if rank is not None:
            last[rank] = dump  # events come in input order: the later dump wins
    return last


def proxy_ops(dumps: dict[int, NcclProxyDump]) -> list[P2POp]:
    """Return every Send/Recv sub-op of the proxy-state dumps, by rank.

    The peer a proxy dump prints is a rank of the op's communicator, which the dump does
    not name: it is taken as the global rank (the world communicator, the usual case of
    pipeline stages talking through the default group).
    """
    found: list[P2POp] = []
    for rank, dump in sorted(dumps.items()):
        quote = Evidence(dump.ref.source, dump.ref.line, dump.text)
        for _pool, _slot, count, kind, subs in dump.ops:
            if kind not in ("Send", "Recv"):
                continue
            for peer, status, channel in subs:
                found.append(
                    P2POp(
                        rank=rank,
                        op=kind.lower(),
                        peer=peer,
                        channel=channel,
                        seq=count,
                        status=_PROXY_STATUS.get(status, "posted"),
                        source="nccl-proxy",
                        evidence=quote,
                    )
                )
    return found


def proxy_collectives(dumps: dict[int, NcclProxyDump]) -> dict[int, str]:
    """Where the proxy dump shows a rank instead: in a collective (its first active Coll)."""
    where: dict[int, str] = {}
    for rank, dump in sorted(dumps.items()):
        for _pool, _slot, count, kind, subs in dump.ops:
            if kind == "Coll" and any(status != "D" for _peer, status, _ch in subs):
                where[rank] = f"a collective (NCCL proxy: Coll at opCount {count:#x})"
                break
    return where


def flight_ops(index: EvidenceIndex) -> list[P2POp]:
    """Return the point-to-point entries of every flight-recorder dump, done or pending."""
    found: list[P2POp] = []
    for dump in index.all_of(FlightRecorderDump):
        if dump.rank is None:
            continue
        groups = {g.name: g.ranks for g in dump.groups}
        for entry in dump.entries:
            if not entry.is_p2p:
                continue
            named = _FR_NAME.search(entry.profiling_name)
            if named is None:
                continue
            # The first rank is the one that posted the op, the second its peer.
            op, _me, _arrow, second = named.groups()
            members = groups.get(entry.pg_name, ())
            local = int(second)
            peer = members[local] if 0 <= local < len(members) else local
            done = entry.state not in _PENDING_FR or entry.retired
            found.append(
                P2POp(
                    rank=dump.rank,
                    op=op,
                    peer=peer,
                    seq=entry.p2p_seq_id,
                    status="done" if done else "posted",
                    group=entry.pg_name or None,
                    where=entry.describe(),
                    source="flight-recorder",
                    evidence=Evidence(dump.ref.source, entry.index, entry.describe()),
                )
            )
    return found
