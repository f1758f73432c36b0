"""Ranks from sibling file names (per-process files whose names differ in one number) and from
a launcher's own numbering of its workers (torchrun's ``--tee`` prefixes).

Slurm's ``--output=slurm-%j-%t.out``, torchrun's ``--log-dir`` (``attempt_0/3/stderr.log``),
a script's ``worker_3.log``: one file per process, numbered by its rank or by its local rank.
What the number is cannot be told from one name. It can from the siblings: when the files
whose lines name their writer's rank all agree that the number is the rank (or the rank less
a fixed offset: one node's local ranks), two files at least and none against, a sibling whose
lines name no writer (a bare traceback, an out-of-memory error) is the rank its number gives.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from logsleuth.model.base import Event
from logsleuth.model.torch import ChildFailure, LauncherEvent
from logsleuth.parse.base import InputResult

_NUMBER = re.compile(r"(\d{1,7})")
_MIN_AGREEING = 2
"""Files that must agree on what the number is before it names another file's rank."""
_MIXED = -1
"""A file whose lines name more than one rank: a combined log, not one process's."""


def _own_rank(events: Sequence[Event]) -> int | None:
    """The one rank a file's lines name (None: none; ``_MIXED``: several)."""
    ranks = {e.origin.rank for e in events if e.origin.rank is not None}
    if len(ranks) > 1:
        return _MIXED
    return ranks.pop() if ranks else None


def sibling_ranks(files: Sequence[tuple[str, Sequence[Event]]]) -> dict[str, int]:
    """Return the rank of each file that names none but whose siblings say what its name does.

    ``files`` are (input name, its events). Siblings are the files whose names differ in one
    number only; a group holding a combined log (lines of several ranks) says nothing. Only
    the files of groups large enough to decide anything have their lines looked at.
    """
    events_of = dict(files)
    # Siblings: the names equal but for the number at one place (its index among the pieces).
    groups: dict[tuple[int, tuple[str, ...], tuple[str, ...]], list[tuple[str, int]]]
    groups = defaultdict(list)
    for name in events_of:
        pieces = _NUMBER.split(name)
        for i in range(1, len(pieces), 2):
            groups[(i, tuple(pieces[:i]), tuple(pieces[i + 1 :]))].append((name, int(pieces[i])))
    own: dict[str, int | None] = {}
    candidates: dict[str, set[int]] = defaultdict(set)
    for members in groups.values():
        if len(members) <= _MIN_AGREEING:
            continue
        for name, _number in members:
            if name not in own:
                own[name] = _own_rank(events_of[name])
        if any(own[n] == _MIXED for n, _ in members):
            continue
        named = [(rank, number) for n, number in members if (rank := own[n]) is not None]
        offsets = {rank - number for rank, number in named}
        if len(offsets) != 1 or len(named) < _MIN_AGREEING or len(named) == len(members):
            continue
        offset = offsets.pop()
        for name, number in members:
            if own[name] is None and number + offset >= 0:
                candidates[name].add(number + offset)
    # Two numbers of one name that each read as a rank, differently: neither is trusted.
    return {name: ranks.pop() for name, ranks in candidates.items() if len(ranks) == 1}


_WORKER_FATES = frozenset(
    ("closing-signal", "failed", "force-kill", "failure-summary", "error-file")
)
"""The launcher's lines about its workers: a file holding one is the launcher's output."""


def with_rank(result: InputResult, rank: int) -> InputResult:
    """Give ``rank``, the rank of a per-process file, to the lines that name no writer.

    ``std_log_process_02.txt`` or ``rank2.log`` holds one rank's output: a traceback in it
    with no prefix is that rank's. A file whose lines name another rank, or that holds the
    launcher's lines about its workers, is a combined log and keeps its lines as they are.
    """
    bare: list[int] = []
    for i, event in enumerate(result.events):
        origin = event.origin
        if origin.rank is not None and origin.rank != rank:
            return result
        if isinstance(event, ChildFailure) or (
            isinstance(event, LauncherEvent) and event.action in _WORKER_FATES
        ):
            return result
        if origin.rank is None and origin.pid is None and origin.host is None:
            bare.append(i)
    if not bare:
        return result
    events = list(result.events)
    for i in bare:
        events[i] = _ranked(events[i], rank)
    return replace(result, events=tuple(events))


def _ranked(event: Event, rank: int) -> Event:
    """``event`` as written by ``rank``: its origin's rank, and its own where it names none."""
    changes: dict[str, Any] = {"origin": replace(event.origin, rank=rank)}
    if getattr(event, "rank", rank) is None:
        changes["rank"] = rank
    return replace(event, **changes)


def tee_ranks(result: InputResult) -> InputResult:
    """Give the lines torchrun's ``--tee`` tags with a local rank alone their global rank.

    ``[default5]:`` names the worker by its place on its launcher's node. Where the same
    output shows other workers' lines tagged both ways (``[default1]:[rank9]:``), one offset
    (the node's first rank) turns each local rank into the global one. It is used only when
    every such pair of one host agrees on it and no local rank stands for two ranks (two
    nodes' launchers writing into one file). Without such pairs a local rank stays one.
    """
    pairs: dict[str | None, set[tuple[int, int]]] = defaultdict(set)
    for event in result.events:
        origin = event.origin
        if origin.local_rank is not None and origin.rank is not None:
            pairs[origin.host].add((origin.local_rank, origin.rank))
    offsets: dict[str | None, int] = {}
    for host, seen in pairs.items():
        apart = {rank - local for local, rank in seen}
        locals_ = [local for local, _ in seen]
        if len(apart) == 1 and len(set(locals_)) == len(locals_):
            offsets[host] = apart.pop()
    if not offsets:
        return result
    events = list(result.events)
    changed = False
    for i, event in enumerate(events):
        origin = event.origin
        offset = offsets.get(origin.host)
        if offset is None or origin.rank is not None or origin.local_rank is None:
            continue
        events[i] = _ranked(event, origin.local_rank + offset)
        changed = True
    return replace(result, events=tuple(events)) if changed else result
