"""Read an ``ncclras -f json`` report (NCCL 2.28.7+; spec 2.13) into an NcclRasReport.

The text report is a bare block of the NCCL log language (``grammars/nccl.lark`` rule
``ras_line``, read by :class:`~logsleuth.parse.nccl.NcclReader`); the JSON report is a
whole file, recognized by its keys.
"""

from __future__ import annotations

from typing import Any

from logsleuth.model.base import SourceRef
from logsleuth.model.nccl import NcclRasReport


def looks_like_ras_json(data: object) -> bool:
    """Return True for the object ``ncclras -f json`` prints."""
    return isinstance(data, dict) and "nccl_version" in data and "communicators" in data


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _rank(entry: dict[str, Any], what: str) -> tuple[int, str, int, str, str]:
    """Return (rank, GPU, pid, node, what) of a rank entry, as the text report names one."""
    return (
        _int(entry.get("rank")),
        _text(entry.get("cuda_dev")),
        _int(entry.get("pid")),
        _text(entry.get("host")),
        what,
    )


def parse_ras_json(data: dict[str, Any], source: str, first_line: str = "") -> NcclRasReport:
    """Return what the report says is wrong: communicators with missing or failed ranks.

    Malformed parts are skipped, never raised on.
    """
    records: list[tuple[str, str, str]] = []
    ranks: list[tuple[int, str, int, str, str]] = []
    notes: list[str] = []
    comms = data.get("communicators")
    for number, comm in enumerate(comms if isinstance(comms, list) else []):
        if not isinstance(comm, dict):
            continue
        kinds: list[str] = []
        missing = comm.get("missing_ranks")
        for entry in missing if isinstance(missing, list) else []:
            if not isinstance(entry, dict):
                continue
            status = entry.get("status")
            dead = isinstance(status, dict) and bool(status.get("considered_dead"))
            ranks.append(_rank(entry, "dead" if dead else "missing"))
            kinds.append("INCOMPLETE")
        members = comm.get("ranks")
        for entry in members if isinstance(members, list) else []:
            status = entry.get("status") if isinstance(entry, dict) else None
            error = status.get("async_error") if isinstance(status, dict) else None
            if isinstance(entry, dict) and error not in (None, 0, "0", "ncclSuccess"):
                ranks.append(_rank(entry, f"async error {error}"))
                kinds.append("ERROR")
        if _count_mismatch(members if isinstance(members, list) else [], ranks, notes):
            kinds.append("MISMATCH")
        if kinds:
            kind = ",".join(sorted(set(kinds)))
            records.append((f"#{number}", _text(comm.get("hash")), kind))
    version = data.get("nccl_version")
    return NcclRasReport(
        ref=SourceRef(source, 1),
        text=first_line,
        version=_text(version) or None,
        records=tuple(records),
        ranks=tuple(ranks),
        notes=tuple(notes),
    )


def _count_mismatch(
    members: list[Any], ranks: list[tuple[int, str, int, str, str]], notes: list[str]
) -> bool:
    """Say whether the members launched different numbers of one collective type.

    Written the way the text report writes a MISMATCH: a note per group (``3 ranks have
    launched up to operation 6``), and the group that launched the fewest rank by rank
    (``has launched up to operation 5``).
    """
    found = False
    types = sorted(
        {t for m in members if isinstance(m, dict) for t in _counts(m)},
    )
    for op_type in types:
        by_count: dict[int, list[dict[str, Any]]] = {}
        for member in members:
            if isinstance(member, dict) and op_type in _counts(member):
                by_count.setdefault(_counts(member)[op_type], []).append(member)
        if len(by_count) < 2:
            continue
        found = True
        notes.append(f"Communicator ranks have different {op_type} operation counts")
        low = min(by_count)
        for count, group in sorted(by_count.items(), reverse=True):
            if count != low:
                verb = "ranks have" if len(group) > 1 else "rank has"
                notes.append(f"{len(group)} {verb} launched up to operation {count}")
        for member in by_count[low]:
            ranks.append(_rank(member, f"has launched up to operation {low}"))
    return found


def _counts(member: dict[str, Any]) -> dict[str, int]:
    """Return a member's ``collective_counts`` that are numbers."""
    counts = member.get("collective_counts")
    if not isinstance(counts, dict):
        return {}
    return {str(k): v for k, v in counts.items() if _int(v) >= 0}
