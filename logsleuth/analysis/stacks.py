"""Merge the stacks of many processes, STAT-style.

Processes whose main-thread stacks are equal form one :class:`StackClass` (LLNL STAT's
process equivalence classes); :func:`build_stack_tree` merges all stacks into one prefix
tree whose nodes carry the ranks through them; :func:`find_outliers` applies the
"majority is healthy" rule to the classes. Where each stack waits comes from
:mod:`logsleuth.analysis.stack_classify`.

Frames are compared by short function name (py-spy 0.4.3 prints qualified names, older
versions and faulthandler print ``co_name``), library-relative file and line. Native frames
are left out of the comparison: they only appear with ``--native`` and their addresses
differ from process to process.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from logsleuth.analysis.stack_classify import (
    classify_dump,
    frame_label,
    frame_library,
    module_path,
    short_name,
)
from logsleuth.model.diagnosis import StackClass
from logsleuth.model.ranks import format_ranks, parse_ranks
from logsleuth.model.stacks import Frame, StackDump, StackSuspect, StackTreeNode, ThreadStack


@dataclass(frozen=True, slots=True)
class ProcStack:
    """One process's dump and who the process is (rank and host come from outside the dump).

    ``snapshots`` counts the dumps taken of this process (``logsleuth live`` takes two, some
    seconds apart); ``dump`` is the last one. ``moved`` says whether the main thread's stack
    changed between them: False is a process stuck where it is, True one that progresses
    (slowly), None when there is only one snapshot.
    """

    rank: int | None
    host: str | None
    pid: int | None
    dump: StackDump
    snapshots: int = 1
    moved: bool | None = None
    _state: tuple[str, str | None, str | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def state(self) -> tuple[str, str | None, str | None]:
        """Return :func:`classify_dump` of ``dump``, worked out once.

        The rank table, the wait-for graph and the point-to-point view each ask it of every
        process; at thousands of ranks classifying each dump once a run is what counts.
        """
        if self._state is None:
            object.__setattr__(self, "_state", classify_dump(self.dump))
        assert self._state is not None
        return self._state


def main_stack_key(dump: StackDump) -> tuple[tuple[str, str, int | None], ...]:
    """Return what two snapshots (or two processes) must share to count as the same stack."""
    return tuple(_frame_key(f) for f in _key_frames(dump.main_thread()))


# ---- merging processes ---------------------------------------------------------------------

_FrameKey = tuple[str, str, int | None]


def _key_frames(thread: ThreadStack | None) -> tuple[Frame, ...]:
    """Return the frames two processes must share to be in one class (innermost first)."""
    if thread is None:
        return ()
    python = tuple(f for f in thread.frames if not f.native)
    if python:
        return python
    return tuple(f for f in thread.frames if not f.func.startswith("0x"))


def _frame_key(frame: Frame) -> _FrameKey:
    name = frame.func if frame.native else short_name(frame.func)
    return name, module_path(frame.file), frame.line


def _unique(procs: Iterable[ProcStack]) -> list[ProcStack]:
    """Keep one dump per process: the last one, which is the latest when a file repeats."""
    latest: dict[tuple[object, ...], ProcStack] = {}
    for index, proc in enumerate(procs):
        key: tuple[object, ...] = (
            (proc.host, proc.pid, proc.rank) if proc.pid is not None else (index,)
        )
        latest.pop(key, None)
        latest[key] = proc
    return list(latest.values())


@dataclass(slots=True)
class _Members:
    ranks: set[int] = field(default_factory=set)
    pids: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    count: int = 0

    def add(self, proc: ProcStack) -> None:
        self.count += 1
        if proc.rank is not None:
            self.ranks.add(proc.rank)
        if proc.pid is not None:
            self.pids.add(proc.pid)
        if proc.host is not None:
            self.hosts.add(proc.host)

    def add_class(self, cls: StackClass) -> None:
        self.count += cls.count
        self.ranks.update(parse_ranks(cls.ranks) if cls.ranks else ())
        if not cls.ranks:
            self.pids.update(cls.pids)
        self.hosts.update(cls.hosts)

    def order(self) -> tuple[int, int, int]:
        """Sort key: largest first, then by the first rank, then by the first pid."""
        first_rank = min(self.ranks) if self.ranks else sys.maxsize
        first_pid = min(self.pids) if self.pids else sys.maxsize
        return -self.count, first_rank, first_pid


def build_stack_classes(procs: Sequence[ProcStack]) -> tuple[StackClass, ...]:
    """Group processes whose main-thread stacks are equal, largest class first.

    A process dumped twice (a repeated faulthandler dump, py-spy's duplicated subprocess
    blocks) counts once, with its last dump. ``ranks`` lists the known ranks; ``pids`` holds
    every member's pid, which is how members without a known rank are named.
    """
    groups: dict[tuple[_FrameKey, ...], tuple[tuple[Frame, ...], StackDump, _Members]] = {}
    for proc in _unique(procs):
        frames = _key_frames(proc.dump.main_thread())
        key = tuple(_frame_key(f) for f in frames)
        if key not in groups:
            groups[key] = (frames, proc.dump, _Members())
        groups[key][2].add(proc)
    classes = []
    for key, (frames, dump, members) in groups.items():
        category, collective, call_site = classify_dump(dump)
        stack_class = StackClass(
            ranks=format_ranks(members.ranks),
            count=members.count,
            frames=tuple(frame_label(f) for f in frames),
            category=category,
            call_site=call_site,
            collective=collective,
            pids=tuple(sorted(members.pids)),
            hosts=tuple(sorted(members.hosts)),
            libraries=tuple(frame_library(f) for f in frames),
        )
        classes.append((members.order(), key, stack_class))
    classes.sort(key=lambda item: (item[0], item[1]))
    return tuple(c for _, _, c in classes)


@dataclass(slots=True)
class _TreeBuilder:
    frame: str
    library: str | None = None
    members: _Members = field(default_factory=_Members)
    children: dict[object, _TreeBuilder] = field(default_factory=dict)
    ends: list[StackClass] = field(default_factory=list)
    suspect: str | None = None

    def freeze(self) -> StackTreeNode:
        kids = sorted(self.children.values(), key=lambda c: (c.members.order(), c.frame))
        members = self.members
        ends = self.ends
        return StackTreeNode(
            frame=self.frame,
            count=members.count,
            ranks=tuple(sorted(members.ranks)),
            pids=tuple(sorted(members.pids)) if not members.ranks else (),
            children=tuple(child.freeze() for child in kids),
            library=self.library,
            category=ends[0].category if ends else None,
            collective=ends[0].collective if ends else None,
            call_site=ends[0].call_site if ends else None,
            suspect=self.suspect,
        )


def build_stack_tree(procs: Sequence[ProcStack], *, all_threads: bool = False) -> StackTreeNode:
    """Merge the main-thread stacks of ``procs`` into one prefix tree, outermost frame first.

    Like STAT's call-graph prefix tree: each node lists the ranks (or, where no rank is
    known for any member, the pids) whose stacks pass through it, and a node visited by
    fewer processes than its parent marks where they went different ways. With
    ``all_threads`` every thread of every process is merged in too (STAT's default): a
    process counts once per node however many of its threads pass through it.
    """
    root = _TreeBuilder("")
    for proc in _unique(procs):
        root.members.add(proc)
        threads = proc.dump.threads if all_threads else (proc.dump.main_thread(),)
        visited: set[int] = set()
        for thread in threads:
            node = root
            for frame in reversed(_key_frames(thread)):
                key = _frame_key(frame)
                child = node.children.get(key)
                if child is None:
                    child = node.children[key] = _TreeBuilder(
                        frame_label(frame), frame_library(frame)
                    )
                if id(child) not in visited:
                    visited.add(id(child))
                    child.members.add(proc)
                node = child
    return root.freeze()


def build_class_tree(classes: Sequence[StackClass]) -> StackTreeNode:
    """Merge stack classes into the STAT prefix tree, outermost frame first.

    The same tree as :func:`build_stack_tree` of their processes, built from what a
    :class:`~logsleuth.model.diagnosis.Diagnosis` keeps: each class's frames and members.
    Every node says which library its frame runs in, as the class recorded it when it was
    built from the dumps (so reports can fold library frames);
    the node where a class's stack ends carries the class's category, collective and call
    site, and the kind of :func:`find_outliers` suspect it is, if any.
    """
    suspects = {id(s.stack_class): s.kind for s in find_outliers(classes)}
    root = _TreeBuilder("")
    for cls in classes:
        node = root
        node.members.add_class(cls)
        libraries = cls.libraries if len(cls.libraries) == len(cls.frames) else ()
        for i in reversed(range(len(cls.frames))):
            label = cls.frames[i]
            child = node.children.get(label)
            if child is None:
                library = libraries[i] if libraries else None
                child = node.children[label] = _TreeBuilder(label, library)
            child.members.add_class(cls)
            node = child
        node.ends.append(cls)
        node.suspect = node.suspect or suspects.get(id(cls))
    return root.freeze()


def _who(count: int) -> str:
    return "1 process is" if count == 1 else f"{count} processes are"


def find_outliers(classes: Sequence[StackClass]) -> tuple[StackSuspect, ...]:
    """Find the stack classes that differ from what most processes do (majority is healthy).

    The rule: when more than half of all processes wait in a collective, every class
    that is not in a collective is a suspect (``non-collective``: the straggler the others
    wait for). When, in addition, one collective holds more of the waiting processes than
    any other, classes waiting in a different collective are suspects too
    (``other-collective``: a desync, usually caused by the straggler). Without a collective
    majority nothing is flagged: there is no healthy behaviour to compare with.
    Suspects come in the order of ``classes``, non-collective ones first.
    """
    total = sum(c.count for c in classes)
    waiting = [c for c in classes if c.category == "collective"]
    in_collective = sum(c.count for c in waiting)
    if total == 0 or in_collective * 2 <= total:
        return ()
    per_op: Counter[str] = Counter()
    for c in waiting:
        per_op[c.collective or "an unknown collective"] += c.count
    ranked = per_op.most_common()
    ops = ", ".join(f"{op}: {n}" for op, n in ranked)
    suspects = []
    for c in classes:
        if c.category == "collective":
            continue
        where = f" at {c.call_site}" if c.call_site else ""
        reason = (
            f"{in_collective} of {total} processes wait in a collective ({ops}); "
            f"{_who(c.count)} in {c.category}{where} instead"
        )
        suspects.append(StackSuspect(stack_class=c, kind="non-collective", reason=reason))
    if len(ranked) > 1 and ranked[0][1] > ranked[1][1]:
        dominant, size = ranked[0]
        for c in waiting:
            op = c.collective or "an unknown collective"
            if op == dominant or (op == "wait" and c.call_site is None):
                continue  # a native-only stack (c10d::Work::wait) cannot name its collective
            reason = f"{size} of {total} processes wait in {dominant}; {_who(c.count)} in {op}"
            suspects.append(StackSuspect(stack_class=c, kind="other-collective", reason=reason))
    return tuple(suspects)
