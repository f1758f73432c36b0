"""Rules that read what NCCL and the frameworks say went wrong, through the knowledge base.

The knowledge base (:mod:`logsleuth.knowledge`) decides what one message means: its kind,
whether it names a root cause or what a victim sees, and which side is to blame. These rules
decide what that means for the job: which processes wrote it, which peer it names, and how
strongly it competes with the other findings. Messages that a more specific rule reads
(``defer_to``) are left to that rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from logsleuth import knowledge
from logsleuth.analysis.correlate import (
    Death,
    address_hosts,
    host_of_event,
    own_deaths,
    watchdog_ranks,
)
from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.analysis.rules.base import Rule, culprits, describe, message_text
from logsleuth.analysis.rules.network import REMOTE_CLOSED
from logsleuth.analysis.rules.setup import SETUP_EVENTS
from logsleuth.analysis.rules.streams import stream_of, traces_of
from logsleuth.knowledge import Entry, Hit
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.nccl import (
    NcclCommInit,
    NcclConnectRun,
    NcclInfoNote,
    NcclNetPlugin,
    NcclUnrecognized,
    NcclWarn,
)
from logsleuth.model.ranks import format_ranks
from logsleuth.model.torch import (
    GlooError,
    LauncherEvent,
    PythonTraceback,
    WatchdogError,
)

_IP = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3})")
_QUOTE = 160
"""Characters of a message quoted in a title."""


@dataclass(frozen=True, slots=True)
class Known:
    """An event whose message the knowledge base recognized."""

    event: Event
    hit: Hit
    text: str


def event_text(event: Event) -> str:
    """Return the message text of an error event, chained exception messages included."""
    if isinstance(event, LauncherEvent) and event.action == "failed":
        # The agent's "failed (exitcode: -9) local_rank: 3 (pid: 42) of binary: ..." says it
        # all in its fields; the line as read keeps the words the knowledge base looks for.
        return event.text
    if isinstance(event, LauncherEvent) and event.action == "death-signal":
        # The agent itself was signalled (its message, as elastic's api.py prints it).
        return f"Received {event.signal or 'a'} death signal, shutting down workers"
    text = message_text(event).strip()
    if isinstance(event, PythonTraceback) and not text and event.exc_type:
        # An exception raised without a message (``raise RendezvousTimeoutError``) says it
        # all by its type.
        text = event.exc_type
    if isinstance(event, PythonTraceback) and event.causes:
        text = " ".join([text, *(m for _, m in event.causes if m)])
    return text


_INFORMATIONAL = frozenset({"INFO", "TRACE", "DEBUG", "VLOG(2)", "CALL", "VERSION"})


def _informational(message: LogMessage) -> bool:
    """Return True for a message printed at an informational level (INFO, TRACE, DEBUG).

    A message behind an exception type (``RuntimeError: ...``) was raised, whatever level
    the catalog row it matched logs it at. An analyzer's report (``fr_trace``, the flight
    recorder's) states its findings at INFO: its level says nothing about the job.
    """
    if message.family in _ANALYZERS:
        return False
    return message.level.upper() in _INFORMATIONAL and not raised(message)


_ANALYZERS = frozenset({"fr_trace"})


_RAISED = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Failure))\s*:(?:\s|$)")
"""An exception type before a message: what follows it was raised (``RuntimeError: ...``)."""


def raised_type(message: LogMessage) -> str | None:
    """The exception type ``message`` stands behind in its line (its label), or None."""
    found = _RAISED.search(message.label) if message.label else None
    return found.group(1) if found is not None else None


def raised(message: LogMessage) -> bool:
    """Say whether ``message`` stands behind an exception type in its line (its label)."""
    return raised_type(message) is not None


def lookup_event(event: Event) -> tuple[Hit | None, str]:
    """Return the entry an error event's text matches, and the text it was read as."""
    text = event_text(event)
    hit = knowledge.lookup(text) if text else None
    if hit is None and text and isinstance(event, WatchdogError) and event.kind == "nccl-error":
        # ``NCCL error in: ...cpp:1269, internal error, NCCL version 2.14.3``: the result's
        # words alone ("internal error") are read as NCCL's result.
        text = f"NCCL error: {text}"
        hit = knowledge.lookup(text)
    if hit is None and text and isinstance(event, PythonTraceback) and event.exc_type:
        # A message that means something only with its type (``DistNetworkError: Connection
        # reset by peer`` is the store's socket) is read as the line printed it.
        typed = f"{event.exc_type}: {text}"
        if (hit := knowledge.lookup(typed)) is not None:
            text = typed
    return hit, text


def known_messages(index: EvidenceIndex) -> list[Known]:
    """Return the events whose message text an entry of the knowledge base matches."""
    messages = index.all_of(LogMessage)
    # A message at an informational level (an NCCL INFO line, a framework's INFO or debug
    # line) that quotes a failure's words is no failure: it counts as an INFO line below.
    events: list[Event] = [*index.warns, *(m for m in messages if not _informational(m))]
    events += index.failures
    events += [e for e in index.torch if isinstance(e, WatchdogError | PythonTraceback | GlooError)]
    # c10 warnings the launcher grammar reads as notices ("[W socket.cpp:663] [c10d] The client
    # socket has failed to connect ...") say what failed too.
    events += index.all_of(LauncherEvent)
    # faulthandler's reason for a dump ("Fatal Python error: Segmentation fault").
    events += [d for d in index.dumps if d.reason]
    found: list[Known] = []
    for event in events:
        hit, text = lookup_event(event)
        if hit is None and isinstance(event, LogMessage) and event.label:
            # The catalog may have typed the line by a message quoted inside another (a
            # desync report cut at a width, read as the fingerprint after its first words):
            # the knowledge base then reads the whole line.
            text = f"{event.label} {text}"
            hit = knowledge.lookup(text)
        if hit is not None:
            if (
                hit.entry.role == "benign"
                and isinstance(event, NcclWarn)
                and (code := _unwound(index, event)) is not None
            ):
                hit = replace(hit, entry=_failed_on(hit.entry, code))
            found.append(Known(event, hit, text))
    found = _drop_caught(found)
    # INFO lines count only for the downgrades NCCL reports there (a cause of severity warning)
    # and the failures a project reports at that level.
    info: list[Event] = [e for e in index.all_of(NcclUnrecognized) if e.level == "INFO"]
    info += [m for m in messages if _informational(m)]
    info += index.all_of(NcclNetPlugin)
    # RAS events NCCL notes at INFO (a peer declared dead), which the grammar reads as notes.
    info += [n for n in index.notes if n.topic == "ras"]
    for event in info:
        text = (
            str(dict(event.fields).get("message", ""))
            if isinstance(event, NcclInfoNote)
            else str(getattr(event, "message", ""))
        )
        hit = knowledge.lookup(text) if text else None
        if hit is None:
            continue
        entry = hit.entry
        if entry.reported_at_info or (entry.role == "cause" and entry.severity == "warning"):
            found.append(Known(event, hit, text))
    return found


def _drop_caught(found: list[Known]) -> list[Known]:
    """Drop the tracebacks a known ``logger.exception`` record printed as its detail.

    ``logger.exception(msg)`` writes the record, then the traceback of the exception it
    caught (the catalog's level ``ERROR(exception)``). The record says what failed (torchrun's
    ``Error waiting on exit barrier``); the exception is how its code noticed it (the store
    barrier's ``Timed out ... waiting for clients``, which alone reads as an init stall).
    """
    records = {
        (k.event.ref.source, k.event.ref.line)
        for k in found
        if isinstance(k.event, LogMessage) and k.event.level.endswith("(exception)")
    }
    if not records:
        return found
    return [
        k
        for k in found
        if not (
            isinstance(k.event, PythonTraceback)
            and (k.event.ref.source, k.event.ref.line - 1) in records
        )
    ]


_UNWIND_REACH = 3
"""How many lines after a WARN the first line of NCCL's unwinding (``file.cc:N -> 2``) stands."""


def _unwound(index: EvidenceIndex, warn: NcclWarn) -> int | None:
    """The error code NCCL's thread unwound with right after ``warn`` (``-> 2``), or None.

    A WARN that NCCL goes on from is followed by other work; one it failed on is followed
    by the back-trace of the call that returned the error, on the same thread.
    """
    for trace in traces_of(index, stream_of(warn)):
        if (
            trace.code != 0
            and trace.ref.source == warn.ref.source
            and trace.origin.tid == warn.origin.tid
            and 0 < trace.ref.line - warn.ref.line <= _UNWIND_REACH
        ):
            return trace.code
    return None


def _failed_on(entry: Entry, code: int) -> Entry:
    """``entry`` as it reads a harmless WARN that NCCL did not go on from, but failed on.

    What a newer NCCL skips (an optional sysfs path, a plugin) an older one needed: the WARN
    is then the failure's own report, its writer the process that failed (in its
    communicator's initialization, where that never completed).
    """
    return replace(
        entry,
        role="cause",
        culprit="self",
        severity="error",
        before_init_kind=entry.before_init_kind or "init-stall",
        meaning=(
            f"{entry.meaning} Here NCCL did not go on: the thread that printed it unwound with "
            f"error {code} right after, so this is what failed (this NCCL version or setting "
            "needs what the WARN says is missing)."
        ),
    )


def explained_by_knowledge(warn: NcclWarn | LogMessage) -> bool:
    """Say whether ``warn`` needs no fallback: harmless (benign, a warning) or a known symptom.

    Known causes and internal errors raise error findings of their own; a known symptom is
    reported by :class:`KnownSymptom`, which runs where the generic fallback would.
    """
    entry = knowledge.match(warn.message)
    return entry is not None and (entry.severity in ("info", "warning") or entry.role == "symptom")


_READS_MESSAGES = frozenset({"LS121"})
"""Rules that read every message of their family by its text (Horovod's stall inspector)."""


def _read_elsewhere(index: EvidenceIndex, known: Known, completed: set[Stream]) -> bool:
    """Say whether the rule named by the entry's ``defer_to`` reads this event itself."""
    event, code = known.event, known.hit.entry.defer_to
    if (
        isinstance(event, LogMessage)
        and known.hit.entry.kind == "process-died"
        and _ABORTED.search(known.text)
        and _watchdog_aborted(
            index, event.origin.host, known.hit.field("local_rank"), known.hit.field("rank")
        )
    ):
        # A launcher's line about a worker its watchdog aborted (DeepSpeed's ``exits with
        # return code = -6``): the timed-out collective is what the collective rules read.
        return True
    if code is None:
        return False
    if isinstance(event, WatchdogError):
        return code == "LS203" and bool(REMOTE_CLOSED.search(known.text))
    if isinstance(event, LogMessage) and code in _READS_MESSAGES:
        return True
    if isinstance(event, LogMessage) and code == "LS204":
        # A failure summary the catalog typed as one message (flattened onto one line),
        # whose entry the summary reader also read: LS204 names its rank and host.
        named = dict(known.hit.fields).get("pid")
        return named is not None and any(str(f.pid) == named for f in index.failures)
    if isinstance(event, PythonTraceback) and code == "LS204":
        return True  # LS204 names the rank that raised it
    if isinstance(event, LauncherEvent) and code == "LS204" and _watchdogs_abort(index, event):
        return True  # the timed-out collective is what the collective rules read
    if isinstance(event, LauncherEvent) and code == "LS204":
        # The agent's "failed (exitcode: ...)" line of a worker its failure summary lists.
        return event.pid is not None and any(f.pid == event.pid for f in index.failures)
    if not isinstance(event, NcclWarn):
        return False
    family = {"LS301": "duplicate-gpu", "LS302": "shm", "LS303": "cuda", "LS202": "ib-completion"}
    if code in family:
        return event.family == family[code]
    if code == "LS203":
        return event.family in ("socket", "proxy") and bool(REMOTE_CLOSED.search(event.message))
    if code == "LS201" and event.family == "socket" and "connect" in event.message.lower():
        stream = stream_of(event)
        return stream not in completed or any(
            "bootstrap" in t.file for t in traces_of(index, stream)
        )
    return False


def _raised_on(knowns: Sequence[Known]) -> set[str | None]:
    """The hosts (None: unnamed) where a worker's own error says what went wrong."""
    return {
        k.event.origin.host
        for k in knowns
        if isinstance(k.event, PythonTraceback)
        or (isinstance(k.event, LogMessage) and k.hit.entry.kind != "process-died")
    }


_SHELL = "platform/shell"


def _first_errors(knowns: Sequence[Known]) -> dict[str, int]:
    """Per input, the first line of an error some program printed (not the shell's)."""
    first: dict[str, int] = {}
    for k in knowns:
        if k.hit.entry.family != _SHELL and k.hit.entry.role in ("cause", "symptom"):
            ref = k.event.ref
            first[ref.source] = min(first.get(ref.source, ref.line), ref.line)
    return first


def _shell_aftermath(known: Known, first_error: dict[str, int]) -> bool:
    """Say whether ``known`` is the shell's report of its command's end after that command
    printed an error of its own (``Killed`` under a server's ``Received sigquit from a
    child process``): the shell prints it when the command ends, below all it printed, so
    the error above says why it ended; alone, the kill is the reading."""
    if known.hit.entry.family != _SHELL:
        return False
    line = first_error.get(known.event.ref.source)
    return line is not None and line < known.event.ref.line


def _exit_of_raised(known: Known, raised: set[str | None]) -> bool:
    """Say whether ``known`` is a launcher's ``failed (exitcode: 1)`` of a worker that raised.

    Exit status 1 is how Python ends on an uncaught exception: where a worker of that host
    printed its error (a traceback, a ``RuntimeError: ...`` line), that error is the reading
    and the launcher's line its aftermath. A line that names no host is any worker's.
    """
    event = known.event
    if isinstance(event, LauncherEvent):
        exit_1 = event.exitcode == 1 and event.signal is None
    else:
        # Another launcher's words for it (srun's ``task 1: Exited with exit code 1``).
        exit_1 = (
            isinstance(event, LogMessage)
            and known.hit.entry.kind == "process-died"
            and _EXIT_1.search(known.text) is not None
        )
    return exit_1 and (event.origin.host in raised or (event.origin.host is None and bool(raised)))


_EXIT_1 = re.compile(r"\bexit(?:ed with exit)? ?code[:=]? ?1\b|\breturn code = 1\b", re.IGNORECASE)
"""A launcher's report of a worker that ended with exit status 1."""


def _watchdogs_abort(index: EvidenceIndex, event: LauncherEvent) -> bool:
    """Say whether a worker's SIGABRT is its watchdog taking the process down.

    ProcessGroupNCCL aborts the process (``exitcode: -6``) after its watchdog reported a
    timed-out collective; the agent's line then gives only the worker's local rank. Unless
    the worker is known to be a rank whose watchdog said nothing, the abort is the wait's
    aftermath.
    """
    if event.signal != "SIGABRT" and event.exitcode != -6:
        return False
    return _watchdog_aborted(index, event.origin.host, event.local_rank)


_ABORTED = re.compile(
    r"(?:return code|exit ?code|exit status)\s*[=:]?\s*(?:-6|134)\b|\bSIGABRT\b|\bAborted\b",
    re.IGNORECASE,
)
"""A launcher's words for a worker that ended by SIGABRT (134: a shell's 128 + 6; srun's
``task 3: Aborted``)."""


def _aborting_ranks(index: EvidenceIndex) -> set[int | None]:
    """The ranks that end themselves with SIGABRT: those whose watchdog reported a timed-out
    or failed collective, and those whose heartbeat monitor found the watchdog stuck (read
    once per index: each launcher's abort line asks)."""
    cached = index.derived.get("aborting_ranks")
    if isinstance(cached, set):
        return cached
    reported = watchdog_ranks(index)
    for message in index.all_of(LogMessage):
        if (
            message.family == "torch"
            and (hit := knowledge.lookup(message.message)) is not None
            and hit.entry.kind == "watchdog-stuck"
        ):
            reported.add(message.origin.rank if message.origin.rank is not None else message.rank)
    index.derived["aborting_ranks"] = reported
    return reported


def _watchdog_aborted(
    index: EvidenceIndex,
    host: str | None,
    local_rank: int | str | None,
    global_rank: int | str | None = None,
) -> bool:
    """Say whether the worker at ``local_rank`` of ``host`` (or at ``global_rank``; unknown:
    None) aborted after its watchdog reported: no worker known to be a rank whose watchdog
    said nothing."""
    reported = _aborting_ranks(index)
    if not reported:
        return False
    if isinstance(global_rank, str):
        global_rank = int(global_rank) if global_rank.isdigit() else None
    if global_rank is not None:
        return global_rank in reported
    if isinstance(local_rank, str):
        local_rank = int(local_rank) if local_rank.isdigit() else None
    rank = None if local_rank is None else index.rank_at(host, local_rank)
    return rank is None or rank in reported


@dataclass(slots=True)
class _Group:
    entry: Entry
    kind: str
    events: list[Event]
    writers: list[str]
    texts: list[str]
    ranks: set[int]
    hosts: set[str]
    pids: set[int]
    named: str
    deaths: list[Death] = field(default_factory=list)


class _KnowledgeRule(Rule):
    """Shared reading of known messages; subclasses pick the roles they report."""

    roles: tuple[str, ...] = ()
    kind = "inconclusive"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        completed = {
            (i.origin.host, i.origin.pid)
            for c in index.comms.values()
            for i in c.completed.values()
        }
        deaths = own_deaths(index) if "cause" in self.roles else []
        setting_up = _setting_up(index)
        groups: dict[
            tuple[str, str, tuple[int, ...], tuple[str, ...], tuple[int, ...]], _Group
        ] = {}
        knowns = known_messages(index)
        raised = _raised_on(knowns)
        first_error = _first_errors(knowns)
        for known in knowns:
            entry = known.hit.entry
            if entry.role not in self.roles or _read_elsewhere(index, known, completed):
                continue
            if _exit_of_raised(known, raised) or _shell_aftermath(known, first_error):
                continue
            ranks, hosts, pids, named = _blame(index, known)
            # A peer that died on its own account first (torchrun's summary) explains what its
            # peers saw of it: their errors toward it are the cascade, not a second cause.
            died = [
                d
                for d in deaths
                if entry.culprit == "peer" and (d.host in hosts or d.rank in ranks)
            ]
            kind = _kind_in_phase(entry, known.event, completed, setting_up)
            key = (kind, entry.id, tuple(sorted(ranks)), tuple(sorted(hosts)), tuple(sorted(pids)))
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(
                    entry, kind, [], [], [], set(ranks), set(hosts), set(pids), named
                )
            group.deaths.extend(d for d in died if d not in group.deaths)
            group.events.append(known.event)
            group.texts.append(known.text)
            label = _label(index, known.event)
            if label not in group.writers:
                group.writers.append(label)
        # Of one entry's groups, those that name a culprit come first (``srun: error: HOST:
        # task 5: Out Of Memory`` before the same node's host-less ``slurmstepd`` line).
        for group in sorted(
            groups.values(),
            key=lambda g: (
                -g.entry.priority,
                g.entry.id,
                not (g.ranks or g.hosts or g.pids),
                sorted(g.ranks),
            ),
        ):
            yield self._finding(index, group)

    def _finding(self, index: EvidenceIndex, group: _Group) -> Finding:
        entry = group.entry
        # A known writer covers the unplaced lines of the same message (its continuation, a
        # re-raise quoting it): "pid 1234" alone, not "pid 1234, a process".
        writers = [w for w in group.writers if w != _UNKNOWN_WRITER] or group.writers
        seen_on = ", ".join(writers[:4]) + (
            f" and {len(writers) - 4} more" if len(writers) > 4 else ""
        )
        message = " ".join(group.texts[0].split())
        quote = message if len(message) <= _QUOTE else message[: _QUOTE - 3] + "..."
        blame = {
            "self": (
                f"The worker it names is the culprit: {group.named}."
                if group.named
                else f"The process that printed it is the culprit ({seen_on})."
            ),
            "host": f"The fault is on the host ({', '.join(sorted(group.hosts)) or 'of the writer'})"
            + (
                f"; rank{'' if len(group.ranks) == 1 else 's'} {format_ranks(group.ranks)} "
                f"ran into it, and the others wait for {'it' if len(group.ranks) == 1 else 'them'}."
                if group.ranks and not group.named
                else ", not in one rank."
            )
            + (f" The process it killed is {group.named}." if group.named else ""),
            "peer": (
                f"It points away from the writer: the culprit is {group.named}."
                if group.named
                else "It points away from the writer, at a peer the message does not name."
            ),
            "none": "It names no single culprit.",
        }[entry.culprit]
        role = {
            "cause": "",
            "symptom": " This is what a victim sees; a root cause elsewhere outranks it.",
            "internal": " NCCL's own consistency check failed.",
        }.get(entry.role, "")
        severity = entry.severity
        confidence = _confidence(entry, bool(group.ranks or group.hosts or group.pids))
        steps = (*entry.next_steps, f"logsleuth explain {entry.id}")
        # A line no process is known to have written (a launcher's, a pasted status) is
        # quoted on its own.
        title = quote if group.writers == [_UNKNOWN_WRITER] else f"{seen_on}: {quote}"
        if group.deaths:
            who = ", ".join(f"rank {d.rank} ({d.how})" for d in group.deaths)
            severity, confidence = "warning", 0.6
            title = f"{title} (after {who} died)"
            role = f" {who} had died first: this is its peers seeing it, not a second cause."
            steps = (f"Find out why {who} died (its own output, dmesg).", *steps)
        found = self.finding(
            severity=severity,
            title=title,
            detail=f"{entry.meaning} {blame}{role} ({entry.id}; seen {len(group.events)} time(s).)",
            events=group.events,
            ranks=group.ranks,
            hosts=group.hosts,
            pids=group.pids,
            confidence=confidence,
            next_steps=steps,
        )
        return replace(found, kind=group.kind)


_SETUP_TYPES: tuple[type[Event], ...] = (*SETUP_EVENTS, NcclCommInit, NcclConnectRun)
"""Lines a process writes while it sets a communicator up (its Init START and connection
rows besides): they place its writer in init."""

_DATA_PATH = re.compile(r"\bNET/[A-Za-z][\w-]* ?:")
"""A message of one of NCCL's network transports (``NET/IB :``, ``NET/OFI``, a plugin's): the
data path, which carries traffic only once a communicator is connected."""


def _setting_up(index: EvidenceIndex) -> set[Stream]:
    """Return the processes whose own lines show communicator set-up."""
    return {stream_of(e) for t in _SETUP_TYPES for e in index.by_type.get(t, ())}


def _kind_in_phase(
    entry: Entry, event: Event, completed: set[Stream], setting_up: set[Stream]
) -> str:
    """Return the entry's kind, or its ``before_init_kind`` when the writer never got past init.

    A writer whose own set-up lines show it is in init and who never completed it is before
    init. Where its lines do not place it (an excerpt of the message alone), a message of a
    network transport is the data path (after init); any other counts as before init when no
    process of the evidence completed one (an excerpt of the failing init itself).
    """
    if entry.before_init_kind is None:
        return entry.kind
    stream = stream_of(event)
    if stream != (None, None) and stream in completed:
        return entry.kind
    if stream != (None, None) and stream in setting_up:
        return entry.before_init_kind
    if completed or _DATA_PATH.search(message_text(event)):
        return entry.kind
    return entry.before_init_kind


_PORT = re.compile(r"<\d*>?$")
"""The ``<port>`` NCCL writes after an address (torn before its ``>`` in a cut line)."""

_UNKNOWN_WRITER = "a process"
"""How :func:`_label` names the writer of a line no process is known to have written."""


def _label(index: EvidenceIndex, event: Event) -> str:
    """Name the process that wrote ``event``: ``rank 3 (host pid 12)``, or what is known."""
    stream = stream_of(event)
    if stream != (None, None):
        return describe(index, [stream])
    rank = event.origin.rank if event.origin.rank is not None else getattr(event, "rank", None)
    return f"rank {rank}" if isinstance(rank, int) else _UNKNOWN_WRITER


def _confidence(entry: Entry, named: bool) -> float:
    """How sure a verdict read from one message is.

    A cause the component printed itself (``Duplicate GPU detected``, ``No space left on
    device``) is what the message says, whoever else is missing from the evidence: its kind is
    sure, its side (writer, host, peer) less so when the writer is unnamed. A symptom says
    only that something else failed; an internal error says nothing about the cause.
    """
    if entry.role == "symptom":
        return 0.35
    if entry.role == "internal":
        return 0.4
    if entry.severity == "warning":
        return 0.6
    if entry.culprit == "none" or not named:
        return 0.7
    return 0.8 if entry.culprit in ("self", "host") else 0.7


def _writer(index: EvidenceIndex, event: Event) -> tuple[list[int], list[str], list[int]]:
    stream = stream_of(event)
    ranks, hosts, pids = culprits(index, [stream]) if stream != (None, None) else ([], [], [])
    rank = event.origin.rank if event.origin.rank is not None else getattr(event, "rank", None)
    if isinstance(rank, int) and rank not in ranks:
        ranks.append(rank)
    if isinstance(rank, int) and (proc := index.proc_of_rank(rank)) is not None:
        # A line that names its rank only (``13: [rank13]: ...``): the process other lines
        # place at that rank (its NCCL init line, torchrun's summary).
        hosts += [proc.host] if proc.host and not hosts else []
        pids += [proc.pid] if proc.pid is not None and not pids else []
    if not hosts:
        host = host_of_event(index, event) or getattr(event, "host", None)
        if isinstance(host, str) and host:
            hosts.append(host)
    if not pids and isinstance(getattr(event, "pid", None), int):
        pids.append(event.pid)  # type: ignore[attr-defined]
    return ranks, hosts, pids


def _blame(index: EvidenceIndex, known: Known) -> tuple[list[int], list[str], list[int], str]:
    """Return the culprit (ranks, hosts, pids) of a known message and how to name it."""
    side = known.hit.entry.culprit
    if side in ("self", "host") and any(known.hit.field(f) for f in ("rank", "ranks", "host")):
        # A launcher's or scheduler's line about one of its processes (``srun: error: HOST:
        # task 5: Out Of Memory``, ``mpirun noticed that process rank 3 ... on node HOST``):
        # the process or host it names is the culprit, not the launcher that printed it.
        ranks, hosts, pids, who = _peer(index, known.hit)
        if side == "self" and not ranks:
            # A line about its own writer (Open MPI's ``[host:pid] Signal: ...``): the rank
            # its prefix names is the one it is about.
            ranks = _writer(index, known.event)[0]
        pids = pids or _named_pid(known.hit)
        # The host side says what it names itself (the host, then the process it killed).
        return (ranks, hosts, pids, who) if side == "self" else ([], hosts, pids, "")
    if side == "self" and (named := _named_pid(known.hit)):
        # A parent's line about one of its children (Lightning's ``Child process with PID
        # 4567 terminated with code -9``): that child, on the parent's host, not the parent.
        hosts = _writer(index, known.event)[1]
        on = hosts[0] if len(hosts) == 1 else None
        placed = index.rank_of(on, named[0])
        local = _named_local_rank(known.hit)
        if placed is None and local is not None:
            # torchrun's ``failed (exitcode: -11) local_rank: 2 (pid: 4521)``: the worker's
            # place on the agent's host gives its rank where the evidence places it.
            placed = index.rank_at(on, local)
        who = f"pid {named[0]}" + (f" (local rank {local})" if local is not None else "")
        return ([placed] if placed is not None else []), hosts, named, who
    if side == "self":
        ranks, hosts, pids = _writer(index, known.event)
        local = _named_local_rank(known.hit)
        if local is not None:
            # A launcher's line about one of its workers (DeepSpeed's ``[... '--local_rank=2']
            # exits with return code = -9``): that worker on the launcher's host, not the
            # launcher, is the culprit.
            on = hosts[0] if len(hosts) == 1 else None
            rank = index.rank_at(on, local)
            worker = f"local rank {local}" + (f" on {on}" if on else "")
            worker += f" (rank {rank})" if rank is not None else ""
            return ([rank] if rank is not None else []), hosts, [], worker
        return ranks, hosts, pids, ""
    if side == "host":
        _ranks, hosts, pids = _writer(index, known.event)
        # The process the line names (the OOM killer's victim), not its writer.
        named = _named_pid(known.hit)
        victims = _killed(index, hosts, named)
        if len(victims) == 1:
            # The worker a launcher saw die of SIGKILL is the one the kill took: its rank
            # and pid (``Killed process 4242`` and ``failed (exitcode: -9) ... (pid: 4242)``).
            ((rank, pid, label),) = victims
            return ([rank] if rank is not None else []), hosts, [pid], label
        if named or known.hit.entry.kind != "resource-exhausted":
            return [], hosts, named or pids, ""
        # A rank's own line about a resource its host ran short of (its DataLoader's bus
        # error, the shm segment it could not create): that rank hit the limit and stopped.
        # A host's setup (a plugin, a driver) fails all its ranks alike: none is named.
        return _ranks, hosts, pids, ""
    if side == "none":
        return [], [], [], ""
    return _peer(index, known.hit, known.event)


_SIGKILL_EXITS = frozenset({-9, 137})
"""A worker's exit code when SIGKILL ended it (torchrun's ``-9``, a shell's ``137``)."""


def _killed(
    index: EvidenceIndex, hosts: Sequence[str], pids: Sequence[int]
) -> list[tuple[int | None, int, str]]:
    """The workers a launcher saw die of SIGKILL, as (rank, pid, label): those with one of
    ``pids`` when a pid is named, else those on ``hosts`` (any host when none is known)."""
    victims = []
    for rank, pid, where in _sigkilled(index):
        if pids and pid not in pids:
            continue
        if not pids and hosts and where and where not in hosts:
            continue
        who = f"rank {rank} (pid {pid})" if rank is not None else f"pid {pid}"
        victims.append((rank, pid, who + (f" on {where}" if where else "")))
    return victims


def _sigkilled(index: EvidenceIndex) -> list[tuple[int | None, int, str]]:
    """Every worker a launcher saw die of SIGKILL, as (rank, pid, host or ""): read once
    per index (each host-memory kill message asks)."""
    cached = index.derived.get("sigkilled")
    if isinstance(cached, list):
        return cached
    found: dict[int, tuple[int | None, int, str]] = {}
    for failure in index.failures:
        if failure.pid is not None and (
            failure.signal == "SIGKILL" or failure.exitcode in _SIGKILL_EXITS
        ):
            found.setdefault(failure.pid, (failure.rank, failure.pid, failure.host or ""))
    for event in index.all_of(LauncherEvent):
        if event.action != "failed" or event.pid is None:
            continue
        if event.signal != "SIGKILL" and event.exitcode not in _SIGKILL_EXITS:
            continue
        where = host_of_event(index, event) or ""
        rank = event.origin.rank
        if rank is None and event.local_rank is not None:
            rank = index.rank_at(where or None, event.local_rank)
        found.setdefault(event.pid, (rank, event.pid, where))
    killed = index.derived["sigkilled"] = list(found.values())
    return killed


def _named_local_rank(hit: Hit) -> int | None:
    """The local rank a message names (``local_rank: 2``, ``--local_rank=2``, ``localRank 3``)."""
    named = hit.field("local_rank")
    return int(named) if named and named.isdigit() and len(named) <= 7 else None


def _named_pid(hit: Hit) -> list[int]:
    """The pid a message names (``Killed process 36071``, ``[gpu-b2:4411] Signal: ...``)."""
    named = hit.field("pid")
    return [int(named)] if named and named.isdigit() and len(named) <= 9 else []


_RECORD_FIELD = re.compile(r"\s*[\w.]{1,40}: \S+\s*")
"""A line that is one ``key: value`` field of the record above it."""
_RECORD_FIELDS = 12


def _record_fields(index: EvidenceIndex, event: Event) -> dict[str, str]:
    """The named values of the ``key: value`` lines right below ``event``, of its family."""
    if not isinstance(event, LogMessage):
        return {}
    cached = index.derived.get("message_lines")
    if not isinstance(cached, dict):
        cached = {(m.ref.source, m.ref.line): m for m in index.all_of(LogMessage)}
        index.derived["message_lines"] = cached
    found: dict[str, str] = {}
    seen = False
    for line in range(event.ref.line + 1, event.ref.line + 1 + _RECORD_FIELDS):
        below = cached.get((event.ref.source, line))
        if below is None and not seen:
            continue  # a line of the message itself (a wrapped or multi-line message)
        if not isinstance(below, LogMessage) or below.family != event.family:
            break
        seen = True
        if not _RECORD_FIELD.fullmatch(below.message):
            break
        for name, value in below.fields:
            if name in ("pid", "host", "rank") and value:
                found.setdefault(name, value)
    return found


def _peer(
    index: EvidenceIndex, hit: Hit, event: Event | None = None
) -> tuple[list[int], list[str], list[int], str]:
    """Resolve the peer a message names: an address (to its host), rank(s), a host name, or
    a local rank of the writer's own host (``event``'s)."""
    several = [int(n) for n in re.findall(r"\d+", hit.field("ranks") or "")]
    if len(several) > 1:
        procs = [index.proc_of_rank(r) for r in several]
        hosts = sorted({p.host for p in procs if p is not None and p.host})
        pids = [p.pid for p in procs if p is not None and p.pid is not None]
        return several, hosts, pids, "ranks " + ", ".join(map(str, several))
    rank = hit.field("rank") or (str(several[0]) if several else None)
    local_rank = _named_local_rank(hit)
    on: str | None = None
    if rank is None and event is not None and local_rank is not None:
        # NCCL's proxy about another process of its node (``Could not receive type from
        # localRank 3``): that local rank of the writer's host.
        writers = _writer(index, event)[1]
        on = writers[0] if len(writers) == 1 else None
        placed = index.rank_at_nccl(on, local_rank)
        if placed is None:
            where = f" on {on}" if on else ""
            return [], [on] if on else [], [], f"local rank {local_rank}{where}"
        rank = str(placed)
    if rank is not None and rank.isdigit():
        proc = index.proc_of_rank(int(rank))
        # The host the message names with the rank (``rank 3 ... on node gpu-2``) stands
        # when no other evidence places that rank.
        named_host = (hit.field("host") or on or "").strip("[]()<>,.")
        hosts = [proc.host] if proc and proc.host else [named_host] if named_host else []
        pids = [proc.pid] if proc and proc.pid is not None else []
        return [int(rank)], hosts, pids, f"rank {rank}"
    address = hit.field("peer") or hit.field("host")
    if not address and event is not None:
        record = _record_fields(index, event)
        if "pid" in record or "host" in record:
            # A record whose fields follow it on lines of their own (Ray's ``ActorDiedError``
            # then ``pid: 4471``, ``ip: 10.0.0.7``): the process they describe.
            host, pid = record.get("host"), record.get("pid")
            pids = [int(pid)] if pid and pid.isdigit() and len(pid) <= 9 else []
            placed = index.rank_of(host, pids[0]) if pids else None
            ranks = [placed] if placed is not None else []
            who = " ".join(
                x for x in (f"pid {pid}" if pids else "", f"on {host}" if host else "") if x
            )
            return ranks, [host] if host else [], pids, who
    if not address:
        return [], [], [], ""
    # The process the message names beside its address (Ray's ``Worker IP address: 10.0.0.7
    # ... Worker PID: 5121``).
    pids = _named_pid(hit)
    match = _IP.search(address)
    if match is None:
        # NCCL writes a peer as ``name<port>`` whether the name is an address or a host name.
        name = _PORT.sub("", address.strip("[](),.")).strip("<>")
        return [], [name] if name else [], pids, f"host {name}"
    host = address_hosts(index).get(match.group(1))
    if host is None:
        who = f"pid {pids[0]}" if pids else "the process"
        return [], [match.group(1)], pids, f"{who} at {match.group(1)}"
    if pids and (placed := index.rank_of(host, pids[0])) is not None:
        return [placed], [host], pids, f"rank {placed} (pid {pids[0]} on {host})"
    local = sorted(
        (p for p in index.procs.values() if p.host == host and p.rank is not None),
        key=lambda p: p.rank or 0,
    )
    ranks = [local[0].rank] if len(local) == 1 and local[0].rank is not None and not pids else []
    return ranks, [host], pids, f"host {host} ({match.group(1)})"


class KnownCause(_KnowledgeRule):
    """NCCL or the framework printed a message that names the failure's cause.

    Symptom:
        A WARN or error message that the knowledge base knows as a root cause, e.g.
        ``socketFinalizeAccept: wrong type``, ``XML Import Channel : dev 5 not found``,
        ``Call to ibv_reg_mr failed with error Cannot allocate memory``, ``Failed to bind
        NVLink SHARP (NVLS) Multicast memory``, ``Duplicate GPU detected`` inside a
        ``DistBackendError ... Last error:`` block. The finding takes the entry's kind.

    Likely causes:
        Whatever the entry says (``logsleuth explain ENTRY-ID`` prints it): a resource
        limit of the host, a misconfigured interface or topology file, a broken NIC or GPU,
        a bad argument of this rank, a version mismatch.

    What to check:
        The next steps of the entry, on the culprit the message points at: the writer itself,
        its host, or the peer it names (resolved to a host through the interfaces the ranks
        logged).
    """

    code = "LS701"
    name = "knowledge.cause"
    roles = ("cause",)


class KnownSymptom(_KnowledgeRule):
    """A victim's message (a closed connection, a remote error) with no root cause found.

    Symptom:
        Messages that the knowledge base knows as what a rank sees when something else
        failed: ``Connection closed by remote peer``, ``ncclRemoteError``, ``Horovod has been
        shut down``, a gloo ``Connection closed by peer``. Reported only when no other rule
        found an error, and then pointing away from the writer.

    Likely causes:
        The peer process died (exception, OOM kill, scheduler kill) or the network between
        the two dropped.

    What to check:
        The logs of the peer named (or of every other rank when none is named): its own
        failure is the cause; collect the logs of all ranks if they are missing.
    """

    code = "LS702"
    name = "knowledge.symptom"
    roles = ("symptom",)
    fallback = True


class NcclInternalError(_KnowledgeRule):
    """NCCL failed one of its own consistency checks.

    Symptom:
        A WARN such as ``Element 3 of pool 0 has been lost``, ``ring 2 does not loop back to
        start`` or ``internal error - please report this issue to the NCCL developers``.

    Likely causes:
        An NCCL bug, ranks running different NCCL versions or settings (inconsistent rings),
        memory corruption, or an abort already in progress.

    What to check:
        The NCCL version of every rank (they must match), an earlier error in the same
        process, then the latest NCCL release; report it upstream with all ranks' logs.
    """

    code = "LS703"
    name = "knowledge.nccl_internal"
    roles = ("internal",)


KNOWLEDGE_RULES: Sequence[type[Rule]] = (KnownCause, KnownSymptom, NcclInternalError)
