"""Read PyTorch flight-recorder dumps (``_dump_fr_trace`` pickles and the JSON variant).

A dump is a pickle of plain containers. Pickles from a failed job are still untrusted
input, so they are loaded with an unpickler that refuses every global: no class can be
instantiated and no code runs; a dump that needs one is rejected as not a dump.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from typing import Any

from logsleuth.errors import InputError
from logsleuth.model.base import SourceRef
from logsleuth.model.flight import FlightRecorderDump, FrEntry, FrGroup, FrStatus
from logsleuth.parse import budgets

_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")
_KEYS = frozenset({"version", "entries"})


class _PlainUnpickler(pickle.Unpickler):
    """Unpickle only builtin containers and scalars."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def looks_like_fr_pickle(head: bytes) -> bool:
    """Return True when ``head`` starts like a pickle that holds a flight-recorder dict."""
    return len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5 and b"entries" in head[:4096]


def looks_like_fr_json(data: object) -> bool:
    """Return True when decoded JSON has the flight-recorder top-level keys."""
    return isinstance(data, dict) and data.keys() >= _KEYS and "pg_config" in data


def load_fr_pickle(data: bytes, source: str) -> dict[str, Any]:
    """Unpickle a dump safely.

    Raises:
        InputError: the bytes are not a plain-data pickle with flight-recorder keys.
    """
    if len(data) > budgets.PICKLE_BYTES:
        raise InputError(
            source,
            f"flight-recorder pickle larger than {budgets.PICKLE_BYTES >> 20} MiB; not read",
        )
    try:
        loaded = _PlainUnpickler(io.BytesIO(data)).load()
    except MemoryError as exc:
        raise InputError(source, "flight-recorder pickle does not fit in memory") from exc
    except Exception as exc:  # any unpickling failure means: not a dump we can read
        raise InputError(source, f"not a flight-recorder dump ({_one_line(exc)})") from exc
    if not isinstance(loaded, dict) or not loaded.keys() >= _KEYS:
        raise InputError(source, "pickle is not a flight-recorder dump (no 'version'/'entries')")
    reason = budgets.over_budget(loaded, budgets.PICKLE_OBJECTS)
    if reason is not None:
        raise InputError(source, f"flight-recorder pickle over budget: {reason}; not read")
    return loaded


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if -(1 << 63) <= value < 1 << 64 else None
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 20:
        return int(value)
    return None


def _sizes(value: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list | tuple):
        return ()
    out: list[tuple[int, ...]] = []
    for shape in value:
        if isinstance(shape, list | tuple):
            out.append(tuple(d for d in (_int(x) for x in shape) if d is not None))
    return tuple(out)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _op(profiling_name: str) -> str:
    name = profiling_name.split(":", 1)[-1].strip()
    return name.split(" ", 1)[0].lstrip("_")


def _ranks(text: object) -> tuple[int, ...]:
    if isinstance(text, list | tuple):
        return tuple(r for r in (_int(x) for x in text) if r is not None)
    # A rank is an int32: longer digit runs are not ranks (and would not fit a str() later).
    return tuple(int(n) for n in re.findall(r"-?\d+", str(text)[: 1 << 20]) if len(n) <= 11)


def _entry(index: int, raw: dict[str, Any]) -> FrEntry:
    group = raw.get("process_group") or ("", "")
    name = str(group[0]) if isinstance(group, list | tuple) and group else ""
    desc = str(group[1]) if isinstance(group, list | tuple) and len(group) > 1 else ""
    frames: list[tuple[str, str, int]] = []
    for frame in raw.get("frames") or ():
        if isinstance(frame, dict):
            frames.append(
                (
                    str(frame.get("name", "?")),
                    str(frame.get("filename", "?")),
                    _int(frame.get("line")) or 0,
                )
            )
    profiling = str(raw.get("profiling_name", "?"))
    return FrEntry(
        index=index,
        record_id=_int(raw.get("record_id")) or 0,
        pg_id=_int(raw.get("pg_id")),
        pg_name=name,
        pg_desc=desc,
        collective_seq_id=_int(raw.get("collective_seq_id")) or 0,
        p2p_seq_id=_int(raw.get("p2p_seq_id")) or 0,
        op_id=_int(raw.get("op_id")) or 0,
        profiling_name=profiling,
        op=_op(profiling),
        is_p2p=bool(raw.get("is_p2p", False)),
        input_sizes=_sizes(raw.get("input_sizes")),
        output_sizes=_sizes(raw.get("output_sizes")),
        input_dtypes=_strings(raw.get("input_dtypes")),
        output_dtypes=_strings(raw.get("output_dtypes")),
        state=str(raw.get("state", "?")),
        retired=bool(raw.get("retired", False)),
        timeout_ms=_int(raw.get("timeout_ms")),
        time_created_ns=_int(raw.get("time_created_ns")),
        frames=tuple(frames),
    )


def parse_fr_dump(data: dict[str, Any], source: str) -> FlightRecorderDump:
    """Turn a loaded dump (pickle or JSON) into a :class:`FlightRecorderDump`."""
    groups = []
    config = data.get("pg_config")
    if isinstance(config, dict):
        for key, value in sorted(config.items(), key=lambda kv: str(kv[0])):
            if isinstance(value, dict):
                groups.append(
                    FrGroup(
                        name=str(value.get("name", key)),
                        desc=str(value.get("desc", "")),
                        ranks=_ranks(value.get("ranks", "")),
                    )
                )
    status = []
    raw_status = data.get("pg_status")
    if isinstance(raw_status, dict):
        for key, value in sorted(raw_status.items(), key=lambda kv: str(kv[0])):
            if isinstance(value, dict):
                status.append(
                    FrStatus(
                        pg_id=str(key),
                        last_enqueued=_int(value.get("last_enqueued_collective")),
                        last_started=_int(value.get("last_started_collective")),
                        last_completed=_int(value.get("last_completed_collective")),
                    )
                )
    entries = [
        _entry(i, raw)
        for i, raw in enumerate(data.get("entries") or (), start=1)
        if isinstance(raw, dict)
    ]
    base = source.rsplit("/", 1)[-1]
    match = _RANK_SUFFIX.search(base)
    version = str(data.get("version", "?"))
    lib = data.get("comm_lib_version")
    return FlightRecorderDump(
        ref=SourceRef(source, 1),
        text=f"flight-recorder dump version {version}, {len(entries)} entries",
        rank=int(match.group(1)) if match else None,
        version=version,
        comm_lib_version=str(lib) if lib else None,
        groups=tuple(groups),
        status=tuple(status),
        entries=tuple(entries),
    )


def read_fr_json(text: str, source: str) -> FlightRecorderDump | None:
    """Parse the JSON variant, or return None when the JSON is something else."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return parse_fr_dump(data, source) if looks_like_fr_json(data) else None
