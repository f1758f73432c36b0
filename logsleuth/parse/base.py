"""The contract between the line dispatcher and the family readers.

Every physical line of an input is read once, cleaned (decoding, ANSI, CR, NUL),
stripped of launcher/collector prefixes (the facts in them go into ``Line.hint``), and
offered to the family readers in turn. A reader either declines the line or takes it.
A reader that takes lines emits typed events through the :class:`Sink`, naming the
physical lines each event was built from; those lines count as recognized. Lines a
reader took but never named in an event count as unrecognized, and so do lines no
reader took.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

from logsleuth.model.base import NO_ORIGIN, Event, InputSummary, Origin


@dataclass(frozen=True, slots=True)
class Line:
    """One physical line.

    Attributes:
        no: 1-based line number in the source.
        text: The line after cleaning and prefix stripping: what a reader parses.
        raw: The line after cleaning only, prefixes kept: what evidence quotes.
        hint: What the stripped prefixes said (launcher rank, host, timestamp).
    """

    no: int
    text: str
    raw: str
    hint: Origin = NO_ORIGIN


class Sink:
    """Collects events and which lines became part of a typed event."""

    __slots__ = ("events", "recognized", "unrecognized_events")

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.recognized: set[int] = set()
        self.unrecognized_events = 0

    def emit(self, event: Event, lines: Iterable[int] = ()) -> None:
        """Record ``event``; mark ``lines`` (default: the event's own line) recognized.

        Events whose class says ``RECOGNIZED = False`` are kept (their prefix still tells
        who wrote the line) but their lines are not marked recognized.
        """
        self.events.append(event)
        if not event.RECOGNIZED:
            self.unrecognized_events += 1
            return
        numbers = list(lines)
        if numbers:
            self.recognized.update(numbers)
        else:
            self.recognized.add(event.ref.line)


class Reader(ABC):
    """A family reader: NCCL log lines, torch/launcher lines, stack dumps, ...

    One instance reads one input, so it may keep state across lines (a traceback or a
    dump in progress). ``source`` is the input's display name for :class:`SourceRef`.
    """

    name: str = "reader"

    def __init__(self, source: str) -> None:
        self.source = source

    @abstractmethod
    def feed(self, line: Line, sink: Sink) -> bool:
        """Offer ``line``; return True when this reader takes it.

        A reader with a block in progress (a dump, a traceback) is offered each line
        before any other reader; if it declines, it must close that block first
        (emitting what it has) so that events come out in input order.
        """

    def busy(self) -> bool:
        """Return True while a multi-line block is open and the next line may continue it."""
        return False

    def close(self, sink: Sink) -> None:
        """End of input: emit whatever block is still open (marked truncated if cut)."""
        return None


@dataclass(frozen=True, slots=True)
class InputResult:
    """What reading one input gave: its events in input order and its line accounting."""

    events: tuple[Event, ...]
    summary: InputSummary
    unrecognized_samples: tuple[tuple[int, str], ...] = ()
    """Up to a few (line, text) examples of unrecognized lines, for the data-gaps section."""
    unrecognized_lines: tuple[int, ...] = ()
    """Every unrecognized line's number, only when read with ``audit=True`` (coverage)."""
    host_aliases: tuple[tuple[str, str], ...] = ()
    """(collector's host, NCCL's own hostname) pairs the input's lines carry together
    (:mod:`logsleuth.parse.hostnames`)."""
