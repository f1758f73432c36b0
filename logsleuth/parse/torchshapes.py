"""Parse one torch / launcher line with ``grammars/torch.lark`` into a :class:`Shape`.

The Transformer is the boundary: it turns each entry rule into a ``Shape`` (what kind of
line it is) and each message rule into a ``Payload`` (the event class and its fields).
The reader in :mod:`logsleuth.parse.torchlog` adds where and who, and assembles blocks.
"""

from __future__ import annotations

import calendar
import re
import signal
from dataclasses import dataclass, field
from functools import cache
from typing import Any, cast

from lark import Lark, Token, Transformer, UnexpectedInput, v_args

from logsleuth.model.base import Event
from logsleuth.model.torch import (
    CollectiveFingerprint,
    DebugDump,
    GlooError,
    HeartbeatMonitor,
    LauncherEvent,
    MonitoredBarrierError,
    TorchUnrecognized,
    WatchdogError,
    WatchdogProgress,
    WatchdogTimeout,
)
from logsleuth.parse.grammar import load_parser, terminal_regex

STARTS = (
    "line",
    "tb_body",
    "tb_after",
    "c10_more",
    "summary_line",
    "indented_line",
    "message",
    "prefixed_any",
)
# Linux never hands out pids above PID_MAX_LIMIT; a bigger number in a glog prefix is
# the thread ident that 2024-era torch printed in that column.
_PID_MAX = 4_194_304


@dataclass(frozen=True, slots=True)
class Prefix:
    """A c10 / glog / logging prefix: severity, month/day, seconds since midnight, pid."""

    level: str
    month: int | None = None
    day: int | None = None
    clock: float | None = None
    pid: int | None = None

    def time(self) -> float | None:
        """Return POSIX seconds in 1970 (the prefix has no year) so lines still order."""
        if self.month is None or self.day is None or self.clock is None:
            return None
        if not (1 <= self.month <= 12 and 1 <= self.day <= 31):
            return None
        return calendar.timegm((1970, self.month, self.day, 0, 0, 0)) + self.clock


@dataclass(frozen=True, slots=True)
class Payload:
    """What a message says: the event class and its fields, without where/who."""

    cls: type[Event]
    fields: dict[str, Any]
    rank: int | None = None
    pg: str | None = None
    inner: Payload | None = None

    @property
    def known(self) -> bool:
        """Return True unless the message is of no family the grammar knows."""
        return self.cls is not TorchUnrecognized

    def tagged(self, rank: int | None, pg: str | None) -> Payload:
        """Return this payload with the ``[Rank N]`` / ``[PG ...]`` tag's rank and pg."""
        return Payload(self.cls, self.fields, rank, pg, self.inner)


@dataclass(frozen=True, slots=True)
class Shape:
    """One parsed line: its kind, prefix, message payload and kind-specific values."""

    kind: str
    prefix: Prefix | None = None
    payload: Payload | None = None
    data: dict[str, Any] = field(default_factory=dict)


def _int(token: str) -> int:
    return int(token)


def _signal_name(text: str) -> str:
    """Return ``SIGTERM`` for ``SIGTERM``, ``Signals.SIGTERM`` and ``15``."""
    name = text.removeprefix("Signals.")
    if name.isdigit():
        try:
            return signal.Signals(int(name)).name
        except ValueError:
            return name
    return name


def _exit_signal(exitcode: int) -> str | None:
    """Return the signal a negative torchrun exit code stands for (``-9`` -> ``SIGKILL``)."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


def _opt(children: tuple[Any, ...], index: int) -> str:
    """Return child ``index`` as text, or "" when the optional part is absent."""
    return str(children[index]).strip() if len(children) > index else ""


def _raw(rest: tuple[Token, ...]) -> str:
    """Return the optional rest of a line as printed (no strip at the front)."""
    return str(rest[0]).rstrip() if rest else ""


def _unknown(text: str) -> Payload:
    return Payload(TorchUnrecognized, {"message": text})


def launcher_payload(action: str, message: str = "", **values: Any) -> Payload:
    """Return the payload of a :class:`LauncherEvent` with ``action``."""
    return Payload(LauncherEvent, {"action": action, "message": message, **values})


@cache
def _result_name() -> re.Pattern[str]:
    """The grammar's own NCCL_CODE (``ncclInvalidUsage``: the result's name torch prints on
    the line after its error), at the start of a text."""
    return re.compile(r"\s*(?:" + terminal_regex(_parser(), "NCCL_CODE").pattern + ")")


def _flattened_detail(rest: str) -> dict[str, str]:
    """What follows ``NCCL version X`` on the same line: the continuation lines of the error
    (rule c10_shape's result name and ``Last error: ...``) where a paste or a log collector
    joined them."""
    found: dict[str, str] = {}
    code = _result_name().match(rest)
    if code is not None:
        found["error_code"] = code.group().strip()
    _, said, detail = rest.partition("Last error:")
    if said and detail.strip():
        found["detail"] = detail.strip()
    return found


def error_payload(kind: str, reason: str, **values: Any) -> Payload:
    """Return the payload of a :class:`WatchdogError` of ``kind``."""
    return Payload(WatchdogError, {"kind": kind, "reason": reason, **values})


class _CutShort(UnexpectedInput):
    """A ``WorkNCCL(...)`` cut before the fields that say which collective it is.

    The line is then no watchdog record of ours (the catalog may still read its message).
    """

    pos_in_stream = None  # not past column 0: parse_torch_record gives the line up


@v_args(inline=True)
class LineTransformer(Transformer[Token, Any]):
    """Turn each entry rule of ``torch.lark`` into a :class:`Shape`."""

    # ---- prefixes (rules c10_prefix, glog_prefix, stdlib_prefix)

    def c10_prefix(self, head: Token, *rest: Token) -> Prefix:
        if head.type == "C10_SEV":  # `[E file:line]`: no date, no time
            return Prefix(level=head[1])
        date = head[2:]
        return Prefix(head[1], _int(date[:-2]), _int(date[-2:]), _clock(rest[0]))

    def glog_prefix(self, head: Token, clock: Token, number: Token, *_: Token) -> Prefix:
        pid = _int(number)
        return Prefix(
            head[0],
            _int(head[1:-2]),
            _int(head[-2:]),
            _clock(clock),
            pid if pid < _PID_MAX else None,
        )

    def stdlib_prefix(self, head: Token) -> Prefix:
        bracket = head.find("[")
        return Prefix(level=head[bracket + 1 if bracket > 0 else 0])

    # ---- entry rule `line`

    def c10_line(self, prefix: Prefix, payload: Payload | None = None) -> Shape:
        return Shape("record", prefix, payload or _unknown(""))

    def glog_line(self, prefix: Prefix, payload: Payload | None = None) -> Shape:
        # torch's logging formatter prefixes each line of a multi-line message, so an
        # empty message is the blank line of the OMP_NUM_THREADS banner.
        return Shape("record", prefix, payload or launcher_payload("banner"))

    stdlib_line = glog_line

    def traceback_head(self, _: Token) -> Shape:
        return Shape("traceback-head")

    def py_warning(self, path: Token, lineno: Token, category: Token, *rest: Token) -> Shape:
        values = {"path": str(path), "lineno": _int(lineno), "category": str(category)}
        return Shape("warning", data={**values, "message": _opt(rest, 0)})

    def rule(self, token: Token) -> Shape:
        return Shape("rule", data={"char": token[0]})

    def terminate(self, _: Token, cpp_type: Token, *__: Token) -> Shape:
        return Shape("terminate", data={"type": str(cpp_type)})

    def what(self, _: Token, payload: Payload | None = None) -> Shape:
        return Shape("what", payload=payload or _unknown(""))

    def version(self, _: Token, version: Token) -> Shape:
        return Shape("version", data={"version": str(version)})

    def bare_record(self, *children: Any) -> Shape:
        return Shape("record", payload=self.message(*children))

    def prefixed_any(self, prefix: Token, *rest: Token) -> Shape:
        return Shape("record", payload=_unknown(_opt(rest, 0)), data={"prefix": str(prefix)})

    # ---- messages

    def message(self, *children: Any) -> Payload:
        payload = cast(Payload, children[-1])
        if len(children) == 2:
            rank, pg = children[0]
            return payload.tagged(rank, pg)
        return payload

    def rank_only(self, _: Token, rank: Token, __: Token) -> tuple[int, None]:
        return _int(rank), None

    def pg_rank(self, _: Token, pg: Token, *rest: Token) -> tuple[int, str]:
        return _int(rest[-2]), str(pg)

    def unknown_body(self, text: Token) -> Payload:
        return _unknown(str(text).strip())

    def work(self, _: Token, *fields: tuple[str, str] | Token) -> dict[str, str]:
        work = dict(f for f in fields if isinstance(f, tuple))
        cut = isinstance(fields[-1], Token) and fields[-1].type == "WORK_CUT"
        if cut and ("SeqNum" not in work or "OpType" not in work):
            raise _CutShort("a cut WorkNCCL(...) without its SeqNum and OpType")
        return work

    def work_field(self, key: Token, value: Token) -> tuple[str, str]:
        return str(key), str(value)

    def ran_for(self, ran: Token, _: Token) -> int:
        return _int(ran)

    def ran_for_cut(self, _: Token) -> None:
        return None

    def watchdog_timeout(self, work: dict[str, str], ran: int | None = None) -> Payload:
        return _timeout(work, ran, blocking=False)

    def blocking_timeout(self, work: dict[str, str], *_: Token) -> Payload:
        return _timeout(work, None, blocking=True)

    def watchdog_progress(
        self, work: Token, enqueued: Token, completed: Token, *_: Token
    ) -> Payload:
        return _progress(_int(work), enqueued, completed)

    failure_detected = watchdog_progress

    def dump_signal(self, _: Token, enqueued: Token, completed: Token, *__: Token) -> Payload:
        return _progress(None, enqueued, completed)

    def work_update(self, enqueued: Token, completed: Token, *_: Token) -> Payload:
        return _progress(None, enqueued, completed)

    def ops_failed(self, *rest: Token) -> Payload:
        text = "Some NCCL operations have failed or timed out."
        return error_payload("failed-or-timed-out", f"{text} {_opt(rest, 0)}".strip())

    def taking_down(self, *_: Token) -> Payload:
        return error_payload(
            "taking-down", "To avoid data inconsistency, we are taking the entire process down."
        )

    def pg_terminated(self, inner: Payload) -> Payload:
        if inner.cls is WatchdogError and inner.fields["kind"] == "nccl-error":
            more = {k: v for k in ("detail", "error_code") if (v := inner.fields.get(k))}
            reason = inner.fields["reason"]
            return error_payload(
                "terminated", reason, nccl_version=inner.fields["nccl_version"], **more
            )
        # The reader quotes the inner message; an inner timeout also becomes its own event.
        return Payload(WatchdogError, {"kind": "terminated", "reason": ""}, inner=inner)

    def nccl_version(self, version: Token, *rest: Token) -> tuple[str, dict[str, str]]:
        return str(version), _flattened_detail(_opt(rest, 0))

    def nccl_error(
        self, reason: Token, version: tuple[str, dict[str, str]] | None = None
    ) -> Payload:
        number, more = version or (None, {})
        return error_payload("nccl-error", str(reason).strip(), nccl_version=number, **more)

    def nccl_error_in(
        self, location: Token, reason: Token, version: tuple[str, dict[str, str]] | None = None
    ) -> Payload:
        number, more = version or (None, {})
        return error_payload(
            "nccl-error",
            str(reason).strip(),
            nccl_version=number,
            raised_from=str(location),
            **more,
        )

    def heartbeat(self, *rest: Token) -> Payload:
        text = f"Heartbeat monitor timed out! {_opt(rest, 0)}".strip()
        return Payload(HeartbeatMonitor, {"message": text})

    def watchdog_stuck(self, seconds: Token, *rest: Token) -> Payload:
        text = f"ProcessGroupNCCL's watchdog got stuck for {seconds} seconds {_opt(rest, 0)}"
        return Payload(HeartbeatMonitor, {"message": text.strip()})

    def dump_first(self, *_: Token) -> Payload:
        return Payload(DebugDump, {"kind": "signal-dumping"})

    def dump_preparing(self, *_: Token) -> Payload:
        return Payload(DebugDump, {"kind": "preparing"})

    def dump_finished(self, path: Token) -> Payload:
        return Payload(DebugDump, {"kind": "finished", "path": str(path).strip()})

    def dump_trace_missing(self, *_: Token) -> Payload:
        return Payload(DebugDump, {"kind": "trace-missing"})

    def dump_trace(self, *_: Token) -> Payload:
        return Payload(DebugDump, {"kind": "trace"})

    # ---- fingerprints (rule fingerprint_mismatch)

    def fingerprint_mismatch(
        self, rank: Token, mine: dict[str, str], other: Token, theirs: dict[str, str], *_: Token
    ) -> Payload:
        seq = mine.get("SequenceNumber")
        values = {
            "rank": _int(rank),
            "other_rank": _int(other),
            "seq": _int(seq) if seq is not None else None,
            "op_type": mine.get("OpType"),
            "other_op_type": theirs.get("OpType"),
            "shape": mine.get("TensorShape"),
            "other_shape": theirs.get("TensorShape"),
            "dtype": mine.get("TensorDtypes"),
            "other_dtype": theirs.get("TensorDtypes"),
        }
        return Payload(CollectiveFingerprint, values)

    def fingerprint(self, *items: Any) -> dict[str, str]:
        return dict(item for item in items if isinstance(item, tuple))

    def fp_seq(self, seq: Token) -> tuple[str, str]:
        return "SequenceNumber", str(seq)

    def fp_field(self, key: Token, value: str) -> tuple[str, str]:
        return key[:-1], value.strip()

    def fp_value(self, *parts: str) -> str:
        return "".join(parts)

    def fp_bracket(self, *parts: str) -> str:
        return "[" + "".join(parts) + "]"

    def fp_paren(self, *parts: str) -> str:
        return "(" + "".join(parts) + ")"

    # ---- monitored barrier, gloo

    def monitored_barrier(self, _: Token, ranks: Token, timeout: Token, *__: Token) -> Payload:
        missing = tuple(_int(r) for r in ranks.replace(" ", "").split(","))
        return Payload(
            MonitoredBarrierError, {"missing_ranks": missing, "timeout_ms": _int(timeout)}
        )

    def gloo_error(self, _: Token, payload: Payload) -> Payload:
        return payload

    def gloo_closed(self, peer: Token, *rest: Token) -> Payload:
        return _gloo("connection-closed", f"Connection closed by peer {peer}{_raw(rest)}", peer)

    def gloo_read(self, peer: Token, *rest: Token) -> Payload:
        return _gloo("read-error", f"Read error {peer}{_raw(rest)}", peer)

    def gloo_timeout(self, ms: Token, op: Token, *_: Token) -> Payload:
        text = f"Timed out waiting {ms}ms for {op} operation to complete"
        return _gloo("timeout", text, None, timeout_ms=_int(ms))

    def gloo_connect(self, peer: Token, *rest: Token) -> Payload:
        return _gloo("connect", f"connect {peer}{_raw(rest)}", peer)

    def gloo_other(self, text: Token) -> Payload:
        return _gloo("other", str(text).strip(), None)

    # ---- torchrun agent

    def closing_signal(self, pid: Token, name: Token) -> Payload:
        return launcher_payload("closing-signal", pid=_int(pid), signal=_signal_name(name))

    def child_failed(self, exitcode: Token, local_rank: Token, pid: Token, *rest: Token) -> Payload:
        code = _int(exitcode)
        binary = _opt(rest, 0).removeprefix("of binary:").strip()
        return launcher_payload(
            "failed",
            binary,
            pid=_int(pid),
            local_rank=_int(local_rank),
            exitcode=code,
            signal=_exit_signal(code),
        )

    def force_kill(self, pid: Token, _: Token, name: Token, *__: Token) -> Payload:
        return launcher_payload("force-kill", pid=_int(pid), signal=_signal_name(name))

    def death_signal(self, name: Token) -> Payload:
        return launcher_payload("death-signal", signal=_signal_name(name))

    def error_file(self, path: Token) -> Payload:
        return launcher_payload("error-file", str(path))

    def error_file_set(self, local_rank: Token, path: Token) -> Payload:
        return launcher_payload("error-file", str(path).strip(), local_rank=_int(local_rank))

    def env_warning(self, *rest: Token) -> Payload:
        return launcher_payload(
            "env-warning", f"Setting OMP_NUM_THREADS environment variable {_opt(rest, 0)}".strip()
        )

    def notice(self, head: Token, *rest: Token) -> Payload:
        return launcher_payload("notice", f"{head}{_opt(rest, 0) and ' '}{_opt(rest, 0)}")

    def launch_config(self) -> Payload:
        return launcher_payload("start", "Starting elastic_operator with launch configs:")

    def group_finished(self, *rest: Token) -> Payload:
        return launcher_payload("finished", _opt(rest, 0))

    def role_message(self, role: Token, payload: Payload) -> Payload:
        fields = dict(payload.fields)
        fields["message"] = f"{role}{fields['message']}"
        return Payload(LauncherEvent, fields)

    def role_start(self, *rest: Token) -> Payload:
        return launcher_payload(
            "start",
            "Starting worker group"
            if not rest
            else f"starting workers for entrypoint: {_opt(rest, 0)}",
        )

    def role_rendezvous(self) -> Payload:
        return launcher_payload("rendezvous", "Rendezvous'ing worker group")

    def role_rendezvous_result(self) -> Payload:
        return launcher_payload("rendezvous", "Rendezvous complete for workers. Result:")

    def role_stop(self) -> Payload:
        return launcher_payload("stop", "Stopping worker group")

    def role_finished(self, *_: Token) -> Payload:
        return launcher_payload("finished", "worker group successfully finished.")

    def role_restart(self, state: Token, left: Token, total: Token, *_: Token) -> Payload:
        return launcher_payload("restart", f"Worker group {state}. {left}/{total} attempts left")

    def role_other(self, text: Token) -> Payload:
        return launcher_payload("agent", str(text).strip())

    def banner(self, token: Token) -> Payload:
        return launcher_payload("banner", str(token).strip())

    def config_line(self, token: Token) -> Payload:
        return launcher_payload("config", str(token).strip())

    # ---- c10 continuation (rule c10_shape) and traceback pieces

    def nccl_code(self, code: Token, *rest: Token) -> Shape:
        return Shape(
            "nccl-code", data={"code": str(code), "text": f"{code}: {_opt(rest, 0)}".strip()}
        )

    def last_error(self, *rest: Token) -> Shape:
        return Shape("last-error", data={"detail": _opt(rest, 0) or None})

    def raised_from(self, func: Token, location: Token) -> Shape:
        return Shape("raised-from", data={"text": f"{func} at {location}"})

    def cpp_frame(self, number: Token, *rest: Token) -> Shape:
        return Shape("cpp-frame", data={"text": _opt(rest, 0)})

    def fr_frame(self, _: Token, number: Token, func: Token, location: Token) -> Shape:
        path, _sep, lineno = str(location).rpartition(":")
        frame = (str(func), path, _int(lineno) if lineno.isdigit() and len(lineno) < 10 else 0)
        return Shape("fr-frame", data={"frame": frame})

    def cuda_note(self, token: Token) -> Shape:
        return Shape("note", data={"text": str(token).strip()})

    def tb_frame(self, _: Token, path: Token, lineno: Token, func: Token | None = None) -> Shape:
        name = str(func).strip() if func is not None else "?"
        return Shape("frame", data={"frame": (str(path), _int(lineno), name)})

    tb_frame_nofunc = tb_frame

    def tb_source(self, _: Token) -> Shape:
        return Shape("source")

    def tb_exception(self, exc_type: Token, message: Token | None = None) -> Shape:
        text = str(message)[1:].strip() if message is not None else None
        return Shape("exception", data={"type": str(exc_type), "message": text})

    def tb_chain(self, _: Token) -> Shape:
        return Shape("chain")

    def tb_spawn_child(self, head: Token) -> Shape:
        return Shape("chain", data={"process": _int(head.split()[2])})

    def tb_original(self, *_: Token) -> Shape:
        return Shape("note", data={"text": "Original exception:"})

    def tb_gloo(self, _: Token, payload: Payload) -> Shape:
        return Shape("note", payload=payload, data={"text": payload.fields["message"]})

    # ---- summary block (rule summary_line) and indented lines

    def s_rule(self, token: Token) -> Shape:
        return Shape("s-rule", data={"char": token[0]})

    def s_title(self, token: Token) -> Shape:
        return Shape("s-title", data={"name": str(token).strip().removesuffix("FAILED").strip()})

    def s_failures(self, _: Token) -> Shape:
        return Shape("s-failures")

    def s_root(self, _: Token) -> Shape:
        return Shape("s-root")

    def s_entry(self, _: Token) -> Shape:
        return Shape("s-entry")

    def s_none(self, _: Token) -> Shape:
        return Shape("s-none")

    def _field(self, name: str, rest: tuple[Token, ...]) -> Shape:
        return Shape("s-field", data={"name": name, "value": _opt(rest, 0)})

    def s_time(self, _: Token, *rest: Token) -> Shape:
        return self._field("time", rest)

    def s_host(self, _: Token, *rest: Token) -> Shape:
        return self._field("host", rest)

    def s_error_file(self, _: Token, *rest: Token) -> Shape:
        return self._field("error_file", rest)

    def s_traceback(self, _: Token, *rest: Token) -> Shape:
        return self._field("traceback", rest)

    def s_msg(self, _: Token, *rest: Token) -> Shape:
        return self._field("traceback", (Token("ANY", _opt(rest, 0).strip('"')),))

    def s_rank(self, _: Token, rank: Token, local_rank: Token) -> Shape:
        return Shape("s-rank", data={"rank": _int(rank), "local_rank": _int(local_rank)})

    def s_exitcode(self, _: Token, exitcode: Token, pid: Token, *rest: Token) -> Shape:
        names = [str(t).strip()[1:-1] for t in rest if t.type == "SIG_PAREN"]
        code = _int(exitcode)
        return Shape(
            "s-exit",
            data={
                "exitcode": code,
                "pid": _int(pid),
                "signal": names[0] if names else _exit_signal(code),
            },
        )

    def s_signal(
        self, _: Token, __: Token, number: Token, name: Token, pid: Token, *___: Token
    ) -> Shape:
        text = f"Signal {number} ({name}) received by PID {pid}"
        return Shape("s-field", data={"name": "traceback", "value": text, "signal": str(name)})

    def s_more(self, token: Token) -> Shape:
        return Shape("s-more", data={"text": str(token)})

    def indented_line(self, token: Token) -> Shape:
        return Shape("indented", data={"text": str(token).strip()})


def _clock(text: str) -> float:
    hours, minutes, seconds = text.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _timeout(work: dict[str, str], ran: int | None, *, blocking: bool) -> Payload:
    seq = work.get("SeqNum")
    op_type = work.get("OpType")
    # torch before 1.10 printed no SeqNum (``WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=...)``).
    if op_type is None or (seq is not None and not seq.isdigit()):
        return _unknown("WorkNCCL(" + ", ".join(f"{k}={v}" for k, v in work.items()) + ")")

    def number(key: str) -> int | None:
        value = work.get(key, "")
        return int(value) if value.isdigit() else None

    values = {
        "seq": int(seq) if seq is not None else None,
        "op_type": op_type,
        "numel_in": number("NumelIn"),
        "numel_out": number("NumelOut"),
        "timeout_ms": number("Timeout(ms)"),
        "ran_ms": ran,
        "blocking": blocking,
    }
    return Payload(WatchdogTimeout, values)


def _progress(work: int | None, enqueued: str, completed: str) -> Payload:
    values = {"work": work, "last_enqueued": int(enqueued), "last_completed": int(completed)}
    return Payload(WatchdogProgress, values)


def _gloo(kind: str, message: str, peer: str | None, **values: Any) -> Payload:
    values = {"kind": kind, "message": message, "peer": str(peer) if peer else None, **values}
    return Payload(GlooError, values)


@cache
def _parser() -> Lark:
    """Build the LALR parser for ``torch.lark`` once per process."""
    return load_parser("torch.lark", start=tuple(STARTS), transformer=LineTransformer)


@cache
def _first_token(rule: str) -> re.Pattern[str] | None:
    """What text rule ``rule`` can start with: its first terminals (and ignored ones).

    The contextual lexer only tries these at column 0, so a text none of them matches
    fails there; the check costs a regex match instead of a parser run that fails (most
    lines of most inputs are not torch lines). None when the rule may be empty.
    """
    parser = _parser()
    names = set(parser.parse_interactive("", start=rule).accepts())  # type: ignore[no-untyped-call]
    if "$END" in names:
        return None
    names |= set(parser.lexer_conf.ignore)
    patterns = [parser.get_terminal(name).pattern.to_regexp() for name in sorted(names)]
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def _cannot_start(text: str, rule: str) -> bool:
    first = _first_token(rule)
    return first is not None and first.match(text) is None


def parse_torch_line(text: str, rule: str = "line") -> Shape | None:
    """Parse ``text`` with entry rule ``rule`` of ``torch.lark``; None when it does not fit."""
    if _cannot_start(text, rule):
        return None
    try:
        return cast(Shape, _parser().parse(text, start=rule))
    except UnexpectedInput:
        return None


def parse_torch_record(text: str) -> Shape | None:
    """Parse a line on its own (rule ``line``), else as a torch prefix with an unknown message.

    The fallback rule ``prefixed_any`` only runs when rule ``line`` got past its first
    token: a line that fails at column 0 cannot start with a torch prefix.
    """
    if _cannot_start(text, "line"):
        return None
    try:
        return cast(Shape, _parser().parse(text, start="line"))
    except UnexpectedInput as error:
        if not error.pos_in_stream:
            return None
    shape = parse_torch_line(text, "prefixed_any")
    if shape is None:
        return None
    # The prefix alone parses with rule `line` (a prefixed line with no message).
    alone = parse_torch_line(shape.data["prefix"])
    return Shape("record", alone.prefix if alone else None, shape.payload)


def parse_torch_message(text: str) -> Payload | None:
    """Classify an exception or ``what()`` message with rule ``message``; None when unknown."""
    try:
        payload = cast(Payload, _parser().parse(text, start="message"))
    except UnexpectedInput:
        return None
    return payload if payload.known else None
