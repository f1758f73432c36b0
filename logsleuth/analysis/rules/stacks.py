"""Rules that read where each rank's main thread is (py-spy / faulthandler dumps)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.analysis.stack_classify import call_site_frame, classify_dump, process_role
from logsleuth.analysis.stacks import ProcStack, build_stack_classes, main_stack_key
from logsleuth.model.base import rank_in_file_name
from logsleuth.model.diagnosis import Evidence, Finding, StackClass
from logsleuth.model.ranks import format_ranks, parse_ranks
from logsleuth.model.stacks import GDB, StackDump

_NO_DATA = frozenset({"barrier", "monitored_barrier"})
"""Collectives that carry no data."""
_POINT_TO_POINT = frozenset(
    {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
)
"""Calls that pair one rank with another: a send on one rank and a recv on the next differ by
design (pipeline stages), not as a divergence."""

STALLED = ("data-loading", "lock", "io", "sleep", "compute")
"""Categories in which a rank holds the others up when they wait in a collective."""

_CATEGORY_WORDS = {
    "data-loading": "in data loading",
    "lock": "waiting on a lock",
    "io": "in file or network I/O",
    "sleep": "sleeping",
    "compute": "in compute / CUDA synchronisation",
    "init": "in process-group initialization",
}


_SNAPSHOT = re.compile(r"\.(\d+)\.[A-Za-z]+$")
"""``rank3.2.txt``: the second snapshot of rank 3 in a ``logsleuth live`` bundle."""


def _snapshot_order(dump: StackDump) -> tuple[str, int, int]:
    """Order the dumps of one process: by file (numbered snapshots numerically), then line."""
    match = _SNAPSHOT.search(dump.ref.source)
    if match is None:
        return dump.ref.source, 0, dump.ref.line
    return dump.ref.source[: match.start()], int(match.group(1)), dump.ref.line


def _has_python(dump: StackDump) -> bool:
    main = dump.main_thread()
    return main is not None and any(not f.native for f in main.frames)


def proc_stacks(index: EvidenceIndex) -> list[ProcStack]:
    """Pair each process's stack dumps with its rank and host; one :class:`ProcStack` each.

    Rank identity, in order: the dump's own launcher prefix (``[rank3]:``), what the index
    learned about the process's pid (NCCL's world communicator, the bundle manifest,
    torchrun's failure summary), the file name (``rank3.1.txt``; also for dumps without a
    pid, like faulthandler's). When none says, the rank stays unknown and the process is
    named by its pid.

    A process dumped several times is one entry whose ``dump`` is the last snapshot; its
    ``moved`` says whether the main thread's stack changed between the snapshots. A gdb
    session that listed the threads twice (``bt`` and then ``py-bt``) gives two dumps of
    the same moment: the one with Python frames is kept and no snapshot is counted.

    Worked out once per index (the rules, the wait-for graph and the views all ask).
    """
    cached = index.derived.get("proc_stacks")
    if not isinstance(cached, list):
        cached = index.derived["proc_stacks"] = _proc_stacks(index)
    return list(cached)


def stack_classes(index: EvidenceIndex) -> tuple[StackClass, ...]:
    """Return :func:`build_stack_classes` of :func:`proc_stacks`, worked out once per index."""
    cached = index.derived.get("stack_classes")
    if not isinstance(cached, tuple):
        cached = index.derived["stack_classes"] = build_stack_classes(proc_stacks(index))
    return cached


def _proc_stacks(index: EvidenceIndex) -> list[ProcStack]:
    found: dict[tuple[object, ...], list[ProcStack]] = {}
    # The host of each rank, as EvidenceIndex.proc_of_rank picks it, in one pass (a lookup
    # per dump is quadratic in the ranks).
    host_of: dict[int, str | None] = {}
    for known in index.procs.values():
        if known.rank is not None and (known.rank not in host_of or not host_of[known.rank]):
            host_of[known.rank] = known.host
    for dump in sorted(index.dumps, key=_snapshot_order):
        if process_role(dump) != "rank":
            continue  # data-loader workers, the torchrun agent, helpers: not ranks
        pid = dump.pid if dump.pid is not None else dump.origin.pid
        host = dump.origin.host
        rank = dump.origin.rank
        if rank is None:
            rank = index.rank_of(host, pid)
        if rank is None and pid is not None:
            proc = index.procs.get((host, pid))
            rank = proc.rank if proc else None
        if rank is None and pid is None:
            rank = rank_in_file_name(dump.ref.source)
        if host is None and rank is not None:
            host = host_of.get(rank)
        key: tuple[object, ...] = (rank, host, pid) if rank is None else (rank, None, None)
        if rank is None and pid is None:
            # A dump that names no process is a snapshot of another such dump's process only
            # when both come from one file and show the same main thread (faulthandler's
            # repeated ``Timeout`` dumps); two anonymous dumps are otherwise two processes.
            main = dump.main_thread()
            tid = main.tid if main is not None else None
            key = (None, host, None, dump.ref.source, tid if tid is not None else -dump.ref.line)
        entry = ProcStack(rank=rank, host=host, pid=pid, dump=dump)
        seen = found.setdefault(key, [])
        if seen and seen[-1].dump.ref.source == dump.ref.source and dump.fmt == GDB:
            if _has_python(seen[-1].dump) and not _has_python(dump):
                continue
            seen.pop()
        seen.append(entry)
    procs = []
    for snaps in found.values():
        last = snaps[-1]
        if last.pid is not None:
            # Dumps of one rank by another process (a restarted worker, or a paste that
            # labelled several processes' dumps alike) are not snapshots of this one.
            snaps = [p for p in snaps if p.pid in (last.pid, None)]
        # A dump without frames (a header whose threads were cut off) shows no position:
        # it cannot show a stack that moved.
        stacks = [key for p in snaps if (key := main_stack_key(p.dump))]
        if len(snaps) > 1:
            moved = len(set(stacks)) > 1 if len(stacks) > 1 else None
            last = replace(last, snapshots=len(snaps), moved=moved)
        procs.append(last)
    return sorted(procs, key=lambda p: (p.rank is None, p.rank or 0, p.pid or 0))


def _dumps_for(procs: Sequence[ProcStack], cls: StackClass) -> list[StackDump]:
    ranks = set(parse_ranks(cls.ranks)) if cls.ranks else set()
    pids = set(cls.pids)
    return [p.dump for p in procs if (p.rank is not None and p.rank in ranks) or (p.pid in pids)]


def _procs_for(procs: Sequence[ProcStack], cls: StackClass) -> list[ProcStack]:
    ranks = set(parse_ranks(cls.ranks)) if cls.ranks else set()
    pids = set(cls.pids)
    return [p for p in procs if (p.rank is not None and p.rank in ranks) or (p.pid in pids)]


def snapshot_note(members: Sequence[ProcStack]) -> tuple[str, float]:
    """Say what repeated snapshots of ``members`` show; return (sentence, confidence change).

    Every member dumped more than once with the same main-thread stack each time is stuck
    (more confidence); a member whose stack changed is progressing, slowly, which makes a
    hang less certain. Without repeated snapshots there is nothing to say.
    """
    if not members:
        return "", 0.0
    moving = [p for p in members if p.moved]
    if moving:
        who = _proc_names(moving)
        return (
            f" The main-thread stack of {who} changed between snapshots: it is progressing "
            "(slowly), not stuck.",
            -0.2,
        )
    if all(p.moved is False for p in members):
        shots = min(p.snapshots for p in members)
        return (
            f" The main thread showed the same stack in all {shots} snapshots: it is stuck "
            "there, not slow.",
            0.05,
        )
    return "", 0.0


def _proc_names(procs: Sequence[ProcStack]) -> str:
    ranks = [p.rank for p in procs if p.rank is not None]
    if ranks:
        return ("rank " if len(ranks) == 1 else "ranks ") + format_ranks(ranks)
    return "pid " + ", ".join(str(p.pid) for p in procs)


def _quote_dumps(dumps: Iterable[StackDump]) -> list[Evidence]:
    """Quote each dump's header, its main thread's innermost frame and its call site.

    Process by process, so that with many culprits the first ones are quoted whole within
    the evidence limit. The innermost frame is the innermost Python frame when there is one (native frames of
    ``--native`` dumps differ from process to process), the frame a finding's detail names.
    """
    quoted: list[Evidence] = []
    for dump in dumps:
        quoted.append(Evidence(dump.ref.source, dump.ref.line, dump.text))
        main = dump.main_thread()
        frames = main.frames if main else ()
        innermost = next((f for f in frames if not f.native), frames[0] if frames else None)
        for frame in (innermost, call_site_frame(dump)):
            line = dump.quote(frame) if frame is not None else None
            if line is not None:
                quoted.append(line)
    return quoted


class NonCollectiveStall(Rule):
    """A rank is stuck outside communication while the others wait for it in a collective.

    Symptom:
        Stack dumps show most ranks' main threads inside a torch.distributed collective
        (``all_reduce``, ``barrier``, ...) and one or a few ranks somewhere else: in the
        DataLoader, a lock, file I/O, ``time.sleep``, or compute. When no rank is in a
        collective at all, the process is stuck in that place on its own. Repeated
        snapshots of the same rank with the same stack say it is stuck, not slow; a
        ``--subprocesses`` dump also shows where its DataLoader workers are.

    Likely causes:
        A data-loader worker that hangs or died (NFS, a corrupt sample, a deadlock in a
        worker), a stale lock file (``FileBaton`` from a killed JIT build), slow or hung
        storage, a rank-dependent ``sleep``/poll loop, a CUDA kernel that never ends.

    What to check:
        The culprit's full stack with all threads (``py-spy dump --pid PID``), its data
        loader workers (``py-spy dump --subprocesses``), the file or lock named in the
        innermost frames, and storage health on its host.
    """

    code = "LS104"
    name = "stacks.non_collective"
    kind = "non-collective-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        procs = proc_stacks(index)
        if not procs:
            return
        classes = stack_classes(index)
        waiting = [c for c in classes if c.category == "collective"]
        stalled = [c for c in classes if c.category in STALLED]
        if not stalled:
            return
        n_wait = sum(c.count for c in waiting)
        n_stalled = sum(c.count for c in stalled)
        initializing = any(c.category == "init" for c in classes)
        for cls in stalled:
            if cls.category == "compute" and not waiting:
                continue  # one snapshot of a process computing is not a stall on its own
            if initializing and not waiting:
                continue  # the others wait in rendezvous for it: LS105 (init.stall) says so
            dumps = _dumps_for(procs, cls)
            ranks = sorted(parse_ranks(cls.ranks)) if cls.ranks else []
            where = _CATEGORY_WORDS.get(cls.category, cls.category)
            site = f" at {cls.call_site}" if cls.call_site else ""
            who = _who(cls)
            if waiting:
                collectives = sorted({c.collective or "a collective" for c in waiting})
                title = f"{who} is stuck {where}{site} while {n_wait} rank(s) wait in {', '.join(collectives)}"
                detail = (
                    f"{n_wait} rank(s) are blocked in {', '.join(collectives)} and {who} is not in any "
                    f"collective: its main thread is {where}{site}. The others wait for it."
                )
                confidence = 0.9 if n_wait >= n_stalled else 0.6
            else:
                title = f"{who} is stuck {where}{site}; no rank is in a collective"
                detail = (
                    f"The main thread of {who} is {where}{site}, and no dumped process is inside "
                    "torch.distributed or NCCL: this is not a communication hang."
                )
                confidence = 0.7
            top = cls.frames[0] if cls.frames else "?"
            note, change = snapshot_note(_procs_for(procs, cls))
            confidence = round(min(0.95, max(0.3, confidence + change)), 2)
            workers = _loader_workers(index, cls) if cls.category == "data-loading" else []
            yield self.finding(
                severity="critical",
                title=title,
                detail=detail + f" Innermost frame: {top}." + _workers_note(workers) + note,
                evidence=_quote_dumps(dumps) + _quote_workers(workers),
                ranks=ranks,
                hosts=cls.hosts,
                pids=cls.pids,
                confidence=confidence,
                next_steps=_next_steps(cls),
            )


def _loader_workers(index: EvidenceIndex, cls: StackClass) -> list[StackDump]:
    """Return the dumped DataLoader workers of the class's processes, one per pid.

    ``py-spy dump --subprocesses`` prints them (with their ``Parent Process``): where a
    worker waits is usually the root cause of its rank waiting in the DataLoader.
    """
    parents = set(cls.pids)
    found: dict[int, StackDump] = {}
    for dump in index.dumps:
        if (
            dump.parent_pid in parents
            and dump.pid is not None
            and process_role(dump) == "dataloader-worker"
        ):
            found[dump.pid] = dump  # py-spy 0.3.12-0.4.1 repeat children: keep the last
    return [found[pid] for pid in sorted(found)]


def _workers_note(workers: Sequence[StackDump]) -> str:
    parts = []
    for dump in workers:
        _category, _op, site = classify_dump(dump)
        name = f"pid {dump.pid}" if dump.pid is not None else "one (pid not in its dump)"
        parts.append(f"{name} at {site}" if site else name)
    if not parts:
        return ""
    noun = "worker" if len(parts) == 1 else "workers"
    return f" Its DataLoader {noun}: {'; '.join(parts)}."


def _quote_workers(workers: Sequence[StackDump]) -> list[Evidence]:
    """Quote each worker's header and the call site that says what it is stuck on."""
    quoted: list[Evidence] = []
    for dump in workers:
        quoted.append(Evidence(dump.ref.source, dump.ref.line, dump.text))
        frame = call_site_frame(dump)
        line = dump.quote(frame) if frame is not None else None
        if line is not None:
            quoted.append(line)
    return quoted


def _next_steps(cls: StackClass) -> tuple[str, ...]:
    pid = cls.pids[0] if cls.pids else "PID"
    common = f"Dump every thread of the culprit again a few seconds later: py-spy dump --pid {pid} (does it move?)."
    if cls.category == "data-loading":
        return (
            f"Dump the DataLoader workers too: py-spy dump --subprocesses --pid {pid}; a worker "
            "stuck in I/O or dead (killed by the OOM killer) stalls the loader.",
            "Check the storage the dataset is on from that host, and dmesg for killed workers.",
            "Set a DataLoader timeout= so a stuck worker raises instead of hanging the job.",
        )
    if cls.category == "lock":
        return (
            "Find who holds the lock named in the innermost frames; for torch_extensions "
            "FileBaton waits, delete the stale 'lock' file under ~/.cache/torch_extensions/<op>/.",
            common,
        )
    if cls.category == "io":
        return (
            "Check the file system or endpoint named in the innermost frames from that host.",
            common,
        )
    return (common, "Read the culprit's call site and the code just before it.")


class InitStall(Rule):
    """Some ranks never completed communicator initialization while others did.

    Symptom:
        ``Init START`` without ``Init COMPLETE`` on some ranks of a communicator while
        others completed, or stacks of some ranks inside ``init_process_group`` /
        rendezvous while the rest are already in collectives.

    Likely causes:
        A rank that started late or is stuck before init (data preparation, a lock), a
        bootstrap connection that cannot be made, mismatched ``world_size``/``MASTER_ADDR``
        between ranks, a rank that crashed during init.

    What to check:
        The stacks and logs of the incomplete ranks; ``MASTER_ADDR``/``MASTER_PORT``,
        ``WORLD_SIZE`` and ``RANK`` on every node; ``NCCL_DEBUG=INFO`` bootstrap lines.
    """

    code = "LS105"
    name = "init.stall"
    kind = "init-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for key in sorted(index.comms):
            state = index.comms[key]
            if not state.completed:
                continue
            stuck = sorted(set(state.started) - set(state.completed))
            if not stuck:
                continue
            events = [state.started[r] for r in stuck]
            yield self.finding(
                severity="critical",
                title=f"ranks {_fmt(stuck)} started but never completed init of comm {key}",
                detail=(
                    f"{len(state.completed)} rank(s) of communicator {key} reached Init COMPLETE; "
                    f"rank(s) {_fmt(stuck)} logged Init START and nothing after it."
                ),
                events=events,
                ranks=stuck,
                hosts=sorted({e.origin.host for e in events if e.origin.host}),
                pids=sorted({e.origin.pid for e in events if e.origin.pid is not None}),
                communicator=key,
                confidence=0.7,
                next_steps=(
                    "Dump the stacks of those ranks (py-spy dump --pid PID).",
                    "Check their bootstrap lines (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET) "
                    "and NCCL_SOCKET_IFNAME on their hosts.",
                ),
            )
        procs = proc_stacks(index)
        if not procs:
            return
        classes = stack_classes(index)
        in_init = [c for c in classes if c.category == "init"]
        others = [c for c in classes if c.category == "collective"]
        if in_init and others:
            for cls in in_init:
                yield self.finding(
                    severity="critical",
                    title=f"ranks {cls.ranks or cls.pids} are still initializing while others run collectives",
                    detail=f"Main thread in process-group initialization at {cls.call_site or cls.frames[0]}.",
                    evidence=_quote_dumps(_dumps_for(procs, cls)),
                    ranks=parse_ranks(cls.ranks) if cls.ranks else (),
                    hosts=cls.hosts,
                    pids=cls.pids,
                    confidence=0.7,
                    next_steps=(
                        "Check MASTER_ADDR/MASTER_PORT, WORLD_SIZE and RANK on those ranks.",
                        "Dump their stacks again to see whether rendezvous progresses.",
                    ),
                )
        # The mirror case: most ranks wait in rendezvous for a few that never got there.
        waiting = sum(c.count for c in in_init)
        elsewhere = [c for c in classes if c.category not in ("init", "collective", "idle")]
        late = sum(c.count for c in elsewhere)
        if in_init and elsewhere and not others and waiting >= late:
            for cls in elsewhere:
                who = _who(cls)
                where = _CATEGORY_WORDS.get(cls.category, "in its own code")
                site = f" at {cls.call_site}" if cls.call_site else ""
                yield self.finding(
                    severity="critical",
                    title=(
                        f"{who} is stuck {where}{site} before init_process_group; {waiting} "
                        "rank(s) wait for it in rendezvous"
                    ),
                    detail=(
                        f"{waiting} rank(s) are blocked in process-group initialization (rendezvous "
                        f"waits for every rank), while {who} is {where}{site} and has not called it."
                    ),
                    evidence=_quote_dumps(_dumps_for(procs, cls)),
                    ranks=parse_ranks(cls.ranks) if cls.ranks else (),
                    hosts=cls.hosts,
                    pids=cls.pids,
                    confidence=0.8 if waiting > late else 0.5,
                    next_steps=(
                        f"Read what {who} does before init_process_group{site}: slow data "
                        "preparation, a download or a lock there delays the whole job.",
                        "Create the process group first thing, or raise the rendezvous timeout "
                        "(init_process_group(timeout=...)) if the preparation is legitimately long.",
                    ),
                )


class CollectiveDivergence(Rule):
    """Most ranks wait in one collective while a few wait in a different one.

    Symptom:
        Stack dumps show the majority of ranks inside one torch.distributed call (for
        example ``all_reduce`` at ``train.py:15``) and a minority inside another
        (``barrier``, ``broadcast``, or the same operation from another call site). Each
        side waits for the other forever.

    Likely causes:
        A rank that skipped a collective (rank-dependent condition, an early ``continue``
        or ``break``) and went on to the next one; collectives issued in a different order
        on different ranks; an extra collective on a few ranks (logging, evaluation or
        checkpointing done on rank 0 with a collective inside).

    What to check:
        The two call sites named in the finding and the code between them on the odd
        ranks; ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` reports the mismatch with both calls.
    """

    code = "LS107"
    name = "stacks.divergent_collective"
    kind = "missing-collective"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        # Imported here: the point-to-point analysis reads this module's proc_stacks.
        from logsleuth.analysis.p2p import p2p_view

        frontier = p2p_view(index)
        if frontier is not None and frontier.culprits:
            return  # ranks in send/recv differ by design; LS125 (p2p.frontier) matches them
        procs = proc_stacks(index)
        if len(procs) < 2:
            return
        waiting = [c for c in stack_classes(index) if c.category == "collective" and _knows_call(c)]
        groups: dict[tuple[str, str], list[StackClass]] = {}
        for cls in waiting:
            groups.setdefault((cls.collective or "?", cls.call_site or "?"), []).append(cls)
        if len(groups) < 2:
            return
        ordered = sorted(groups.items(), key=lambda kv: (-sum(c.count for c in kv[1]), kv[0]))
        (ref_op, ref_site), ref_classes = ordered[0]
        ref_count = sum(c.count for c in ref_classes)
        for (op, site), classes in ordered[1:]:
            if op in _POINT_TO_POINT and ref_op in _POINT_TO_POINT:
                continue
            count = sum(c.count for c in classes)
            tie = count == ref_count
            for cls in classes:
                who = _who(cls)
                same_op = op == ref_op
                # A rank waiting in a barrier issued nothing that conflicts: it skipped the
                # majority's collective and went on. One waiting in another data-carrying
                # collective issued it in place of theirs: an order or type mismatch.
                skipped = not same_op and op in _NO_DATA
                kind = "missing-collective" if skipped else "collective-mismatch"
                if same_op:
                    title = f"{who} wait(s) in {op} from {site} while {ref_count} rank(s) wait in {op} from {ref_site}"
                elif not skipped:
                    title = (
                        f"{who} wait(s) in {op} at {site} where {ref_count} rank(s) wait in "
                        f"{ref_op} at {ref_site}: different collectives at the same point"
                    )
                else:
                    title = f"{who} never entered {ref_op} at {ref_site} that {ref_count} rank(s) wait in; it waits in {op} at {site}"
                detail = (
                    f"{ref_count} rank(s) are blocked in {ref_op} called from {ref_site}; {who} "
                    f"is blocked in {op} called from {site}. Neither side can finish."
                )
                if tie:
                    detail += (
                        " The two sides are equally large, so which one diverged is uncertain."
                    )
                note, change = snapshot_note(_procs_for(procs, cls))
                confidence = round(min(0.95, max(0.3, (0.45 if tie else 0.8) + change)), 2)
                yield Finding(
                    code=self.code,
                    name=self.name,
                    kind=kind,
                    severity="critical",
                    title=title,
                    detail=detail + note,
                    ranks=tuple(parse_ranks(cls.ranks)) if cls.ranks else (),
                    hosts=tuple(cls.hosts),
                    pids=tuple(cls.pids),
                    confidence=confidence,
                    evidence=tuple(_quote_dumps(_dumps_for(procs, cls)))[:8],
                    evidence_total=cls.count,
                    next_steps=(
                        f"Read the code between {ref_site} and {site} on {who}: which condition "
                        f"made it skip or reorder {ref_op}?",
                        "Re-run with TORCH_DISTRIBUTED_DEBUG=DETAIL to get the desync report.",
                    ),
                )


def _knows_call(cls: StackClass) -> bool:
    """Tell whether a collective class says which call it waits in.

    A native-only stack (gdb ``bt``, py-spy ``--native`` without Python frames) shows only
    ``c10d::Work::wait`` with no caller: it cannot disagree with the others' collective.
    """
    return not (cls.collective == "wait" and cls.call_site is None)


def _who(cls: StackClass) -> str:
    if cls.ranks:
        ranks = parse_ranks(cls.ranks)
        return f"rank {cls.ranks}" if len(ranks) == 1 else f"ranks {cls.ranks}"
    if cls.pids:
        return "pid " + ", ".join(map(str, cls.pids))
    # A dump cut above its header, from an input that names no rank: no pid either.
    return "a process (no rank or pid in its dump)"


def _fmt(ranks: Iterable[int]) -> str:
    return format_ranks(ranks)
