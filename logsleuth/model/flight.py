"""PyTorch flight-recorder dumps: the last N collectives each rank enqueued, with their state."""

from __future__ import annotations

from dataclasses import dataclass

from logsleuth.model.base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class FrEntry:
    """One entry of a rank's flight-recorder ring buffer (dump format 2.2-2.10)."""

    index: int
    """1-based position in the dump's ``entries`` list: what evidence cites as the line."""
    record_id: int
    pg_id: int | None
    pg_name: str
    pg_desc: str
    collective_seq_id: int
    p2p_seq_id: int
    op_id: int
    profiling_name: str
    """``nccl:all_reduce``, ``gloo:broadcast``, ``nccl:send 1->2`` ..."""
    op: str
    """The operation without backend and peers: ``all_reduce``, ``send``."""
    is_p2p: bool
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str
    """``scheduled`` | ``started`` | ``completed``."""
    retired: bool
    timeout_ms: int | None
    time_created_ns: int | None
    frames: tuple[tuple[str, str, int], ...]
    """Python call stack (name, file, line), innermost first as recorded."""

    def describe(self) -> str:
        """Render the entry the way evidence quotes it."""
        sizes = ",".join("x".join(map(str, s)) or "scalar" for s in self.input_sizes)
        where = ""
        for name, file, line in self.frames:
            if "/torch/" not in file and "site-packages" not in file:
                where = f" at {name} ({file.rsplit('/', 1)[-1]}:{line})"
                break
        return (
            f"#{self.record_id} pg {self.pg_name or self.pg_id} seq {self.collective_seq_id} "
            f"{self.profiling_name} [{sizes}] {'/'.join(self.input_dtypes)} {self.state}"
            f"{' retired' if self.retired else ''}{where}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FrGroup:
    """A process group as the dump's ``pg_config`` describes it."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FrStatus:
    """``pg_status``: how far the rank's process group got."""

    pg_id: str
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FlightRecorderDump(Event):
    """One rank's flight-recorder dump (pickle or JSON)."""

    rank: int | None
    """From the file name (``<prefix><rank>``), the flight recorder's convention."""
    version: str
    comm_lib_version: str | None
    groups: tuple[FrGroup, ...]
    status: tuple[FrStatus, ...]
    entries: tuple[FrEntry, ...]
