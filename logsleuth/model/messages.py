"""Messages recognized by their text wherever they stand in a line (catalog matches)."""

from __future__ import annotations

from dataclasses import dataclass

from logsleuth.model.base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class LogMessage(Event):
    """A known message found anywhere in a line, whatever came before it.

    Produced for lines that no family reader takes whole: a bare ``NCCL WARN ...`` pasted
    into a ticket, a torch error behind a foreign prefix, a gloo/elastic/DeepSpeed/XLA/
    Horovod/NVSHMEM message. ``message`` is the text from the start of the known message to
    the end of the line (continuation lines joined), ``label`` whatever preceded it, kept
    as written when its shape is unknown.

    Attributes:
        family: Who prints it: ``nccl``, ``torch``, ``gloo``, ``elastic``, ``deepspeed``,
            ``xla``, ``horovod``, ``nvshmem``, ``nccl-tests``, ``launcher``, ...
        level: The message's level as the catalog or the line gives it (``WARN``, ``INFO``,
            ``ERROR``, ``TRACE``, ...).
        catalog: The catalog entry it matched (``nccl:<row>``, ``torch:<row>``) or the name
            of a built-in pattern; None when only the family's marker was found.
        message: The message text.
        label: The text before the message (an unknown prefix), stripped.
        fields: Values read from the message's arguments, as (name, value) pairs.
        rank: The global rank the line names, when it does.
    """

    family: str
    level: str
    catalog: str | None
    message: str
    label: str = ""
    fields: tuple[tuple[str, str], ...] = ()
    rank: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SectionHeader(Event):
    """A line of a pasted excerpt that names the process the lines below it come from.

    Tickets group per-process output under headers (``Rank A:``, ``## rank 3``, ``**Worker
    1:**``) with the lines' own prefixes stripped; the lines up to the next header are that
    process's. A numeric label is a rank; another label (``Rank A``) names the process only:
    it stands in for the host so that the two sections stay two processes.

    Attributes:
        label: The header as written, without markup (``Rank A``).
    """

    label: str
