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


def parse_ras_json(data: dict[str, Any], source: str, first_line: str = "") -> NcclRasReport:
    """Return what the report says is wrong: communicators with missing or failed ranks.

    Malformed parts are skipped, never raised on.
    """
    records: list[tuple[str, str, str]] = []
    ranks: list[tuple[int, str, int, str, str]] = []
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
            ranks.append(
                (
                    _int(entry.get("rank")),
                    _text(entry.get("cuda_dev")),
                    _int(entry.get("pid")),
                    _text(entry.get("host")),
                    "dead" if dead else "missing",
                )
            )
            kinds.append("INCOMPLETE")
        members = comm.get("ranks")
        for entry in members if isinstance(members, list) else []:
            status = entry.get("status") if isinstance(entry, dict) else None
            error = status.get("async_error") if isinstance(status, dict) else None
            if isinstance(entry, dict) and error not in (None, 0, "0", "ncclSuccess"):
                ranks.append(
                    (
                        _int(entry.get("rank")),
                        _text(entry.get("cuda_dev")),
                        _int(entry.get("pid")),
                        _text(entry.get("host")),
                        f"async error {error}",
                    )
                )
                kinds.append("ERROR")
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
    )
