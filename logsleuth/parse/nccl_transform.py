"""The Transformer of ``grammars/nccl.lark``: LALR reductions in, model event fields out.

It runs inline in the parser (no parse tree is built) and is the boundary between Lark
and :mod:`logsleuth.model.nccl`: each callback is named like the rule or alias it reduces
and returns plain values (:class:`Head`, :class:`Message`); no Lark object leaves
``logsleuth.parse``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lark import Token, Transformer, v_args

from logsleuth.model.base import Event
from logsleuth.model.nccl import (
    ConnectFields,
    NcclCall,
    NcclChannelConnect,
    NcclCollective,
    NcclCommConfig,
    NcclCommEnd,
    NcclCommInit,
    NcclConnected,
    NcclCudaDriver,
    NcclEnv,
    NcclErrorTrace,
    NcclGraphTree,
    NcclInfoNote,
    NcclInterface,
    NcclNetDevices,
    NcclNetPlugin,
    NcclNetwork,
    NcclRing,
    NcclTree,
    NcclVersion,
    NcclWarn,
)

_PROXY_SUB = re.compile(r"(\d+)([A-Z ]?)/(\d+)")
"""A sub-op of a proxy-state dump op: peer, status letter (or a space), channel."""


@dataclass(frozen=True, slots=True)
class Head:
    """What the line prefix said (spec 1.3): who wrote it and where the message starts."""

    level: str
    host: str | None
    pid: int | None
    tid: int | None
    dev: int | None
    file: str | None
    line_no: int | None
    func: str | None
    message_at: int
    start: int = 0
    """Where the prefix begins (after an NCCL timestamp, if any)."""


@dataclass(frozen=True, slots=True)
class Message:
    """A recognized message: its event class and fields.

    ``continuation`` counts the prefix-less lines NCCL writes after it (spec 1.5).
    """

    cls: type[Event]
    fields: dict[str, Any]
    continuation: int = 0


Parsed = tuple["str | None", "Head | None", "Message | None"]

_NUMBER = re.compile(r"-?\d+")
_IB_VALUE = re.compile(r"(\w+?)\((-?\d+)\)$")
_ERRNO = re.compile(r"^(.*?)\s*\((\d+)\)\.?$")
_COLL_INTS = {
    "count": "count",
    "size": "size",
    "datatype": "datatype",
    "op": "red_op",
    "root": "root",
}
_SOCKET_CALLS = frozenset(
    {"socket", "bind", "listen", "accept", "connect", "recv", "send", "poll", "shutdown"}
    | {"getsockname", "getsockopt", "setsockopt"}
)


def _tok(token: Token | None) -> str | None:
    return None if token is None else str(token)


def _int(token: Token | None) -> int | None:
    return None if token is None else int(token)


def _opt_int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _warn(family: str, *pairs: tuple[str, object], continuation: int = 0) -> Message:
    fields = tuple((key, str(value)) for key, value in pairs if value is not None)
    return Message(NcclWarn, {"family": family, "fields": fields}, continuation)


def _note(topic: str, *pairs: tuple[str, object]) -> Message:
    fields = tuple((key, str(value)) for key, value in pairs if value is not None)
    return Message(NcclInfoNote, {"topic": topic, "fields": fields})


def _iface(token: str) -> tuple[str, str]:
    # "[0]eth0:10.0.0.1<0>" -> ("eth0", "10.0.0.1<0>"); the address may hold ':' (IPv6).
    name, _, address = (
        token.partition("]")[2].partition(":") if token[0] == "[" else token.partition(":")
    )
    return name, address


def _errno_split(text: str) -> tuple[str, str | None]:
    """Split ``No space left on device (28)`` into its text and errno."""
    found = _ERRNO.match(text)
    return (found.group(1), found.group(2)) if found else (text.rstrip("."), None)


def head_of(token: Token) -> Head:
    """Take apart a prefix terminal (``INFO_HEAD``, ``WARN_HEAD``, ...; spec 1.3)."""
    words = token.split()
    host, pid, tid = words[0].rsplit(":", 2)
    dev = None
    # "NCCL INFO", or "INFO" alone before 2.3.
    middle = words[1:-2] if words[-2] == "NCCL" else words[1:-1]
    if middle and middle[0][0] == "[":
        dev = int(middle.pop(0)[1:-1])
    file = func = line_no = None
    if words[-1] == "TRACE":
        # "<ms> func:line": the TRACE location is a function, not a file.
        func, _, number = middle[1].rpartition(":")
        line_no = int(number)
    elif middle:
        file, _, number = middle[0].rpartition(":")
        line_no = int(number)
        if len(middle) > 1:
            func = middle[1][1:-1]
    end = token.end_pos or len(token)
    return Head(
        words[-1], host, int(pid), int(tid), dev, file, line_no, func, end, end - len(token)
    )


CONNECT_FIELDS = (
    "channel",
    "conn_index",
    "from_rank",
    "from_dev",
    "to_rank",
    "to_dev",
    "direction",
    "transport",
)
"""The fields :func:`connect_row` returns, in order (those of :class:`NcclChannelConnect`)."""


def connect_row(head: str, via: str) -> ConnectFields:
    """Take apart a ``CHANNEL_CONNECT`` terminal and the ``via`` text after it.

    ``Channel 00/0 : 37[5] -> 36[4] [send] via``: fixed word positions. The values are
    :data:`CONNECT_FIELDS` in order; the grammar's callback and the reader's fast lane
    (:mod:`logsleuth.parse.nccl_fast`) both build connections from here.
    """
    words = head.split()
    channel, _, second = words[1].partition("/")
    from_rank, _, from_dev = words[3].partition("[")
    to_rank, _, to_dev = words[5].partition("[")
    return (
        int(channel),
        int(second) if second else None,
        int(from_rank),
        from_dev[:-1] or None,
        int(to_rank),
        to_dev[:-1] or None,
        words[6][1:-1] if len(words) == 8 else None,
        via.strip(),
    )


def connect_message(fields: ConnectFields) -> Message:
    """The message of a connection line whose values :func:`connect_row` took apart."""
    return Message(NcclChannelConnect, dict(zip(CONNECT_FIELDS, fields, strict=True)))


def coll_message(body: str) -> Message:
    """Read a ``COLL_MSG`` terminal (spec 2.9): the grammar's callback and the COLL shortcut
    of :mod:`logsleuth.parse.nccl_line` both read collectives here."""
    words = body.split()
    op = "unknown"  # 2.3.5 printed no operation name (spec 2.9)
    if words[0].endswith(":"):
        op = words.pop(0)[:-1]
    values: dict[str, Any] = {"op": op, "op_count": int(words[1], 16)}
    pairs = iter(words[2:])
    for key in pairs:
        if key[0] == "[":
            values["nranks"] = int(key[8:-1])
        elif key in _COLL_INTS:
            values[_COLL_INTS[key]] = int(next(pairs))
        else:
            values[key] = next(pairs)
    values.pop("size", None)
    if op in ("Send", "Recv"):
        # Point-to-point: the "root" column is the peer; there is no reduction.
        values["peer"] = values.pop("root", None)
        values.pop("red_op", None)
    values.setdefault("comm", "")
    return Message(NcclCollective, values)


def comm_state_message(body: str) -> Message:
    """Read a ``COMM_STATE`` terminal (spec 2.2): the grammar's callback and the shortcut of
    :mod:`logsleuth.parse.nccl_line` both read communicator life-cycle lines here."""
    # A glued "key 0- Init" splits like "key 0 - Init".
    words = body.replace("- ", " - ").split()
    if words[0][0] == "[":
        words = words[2:]  # "[Rank N]" (2.29.2+) repeats the rank
    api = None if words[0] == "comm" else words.pop(0)
    dash = words.index("-")
    values: dict[str, str] = {}
    pairs = iter(words[:dash])
    for key in pairs:
        values[key] = next(pairs)
    phase, stage = words[dash + 1], words[dash + 2].rstrip(",")
    common = {
        "comm": values["comm"],
        "rank": int(values["rank"]),
        "nranks": int(values.get("nranks") or values["nRanks"]),
        "cuda_dev": _opt_int(values.get("cudaDev")),
        "bus_id": values.get("busId"),
    }
    if phase != "Init":
        result = words[dash + 4] if len(words) > dash + 4 else None
        return Message(
            NcclCommEnd, {**common, "phase": phase, "stage": stage, "result": _opt_int(result)}
        )
    fields = {
        **common,
        "phase": stage,
        "nvml_dev": _opt_int(values.get("nvmlDev")),
        "comm_id": values.get("commId"),
        "parent": values.get("parent"),
        "split_count": _opt_int(values.get("splitCount") or values.get("childCount")),
        "color": _opt_int(values.get("color")),
        "key": _opt_int(values.get("key")),
        "api": api,
    }
    return Message(NcclCommInit, fields)


def comm_config_message(body: str) -> Message:
    """Read a ``COMM_CONFIG`` terminal (the nNodes/localRanks line, spec 2.2)."""
    words = body.split()
    fields = {
        "comm": words[1],
        "rank": int(words[3]),
        "nranks": int(words[5]),
        "nnodes": int(words[7]),
        "local_ranks": int(words[9]),
        "local_rank": int(words[11]),
        "mnnvl": int(words[13]) if len(words) > 13 else None,
    }
    return Message(NcclCommConfig, fields)


def trees_message(items: Iterable[str]) -> Message:
    """Read the ``TREE_ITEM`` terminals of a ``Trees`` line (spec 2.7), one per channel."""
    channels = tuple(tuple(int(n) for n in _NUMBER.findall(item)) for item in items)
    return Message(NcclTree, {"channels": channels})


@v_args(inline=True)
class ToEvents(Transformer[Token, Any]):
    """Turn the reductions of ``grammars/nccl.lark`` into (timestamp, head, message)."""

    # ---- line structure

    def line(self, stamp: Token | None, record: tuple[Head | None, Message | None]) -> Parsed:
        return _tok(stamp), record[0], record[1]

    def envelope(self, stamp: Token | None, head: Token, _rest: Token | None) -> Parsed:
        return _tok(stamp), head_of(head), None

    def info_line(self, head: Token, msg: Message | None) -> tuple[Head, Message | None]:
        return head_of(head), msg

    trace_line = warn_line = call_line = info_line

    def abort_line(self, head: Token, _rest: Token | None) -> tuple[Head, Message]:
        return head_of(head), _warn("abort")

    def bare_version(self, kw: Token, version: Token) -> tuple[None, Message]:
        return None, self.version(kw, version)

    # ---- proxy-state dump (spec 3.2)

    def proxy_active(self) -> tuple[str, Any]:
        return "active", None

    def proxy_op(self, chain: Token | None, op: Token) -> tuple[str, Any]:
        # "[0-3|1a| Send 1S/0 1S/1]": pool-index | opCount | kind, then sub-ops. The format is
        # "%ld" (decimal), yet the spec's own example prints "1a": read hex digits as hex.
        pool_index, count, rest = op[1:-1].split("|")
        pool, _, index = pool_index.partition("-")
        kind, _, subs = rest.strip().partition(" ")
        # " %d%c/%d" (peer, status, channel); the status is a space when it has none.
        steps = [
            (int(peer), status.strip() or None, int(channel))
            for peer, status, channel in _PROXY_SUB.findall(subs)
        ]
        op_count = int(count) if count.isdigit() else int(count, 16)
        record = (int(pool), int(index), op_count, kind, tuple(steps))
        return ("peer" if chain is not None else "op"), record

    def proxy_bar(self, *_bar: Token) -> tuple[str, Any]:
        return "bar", None

    def proxy_end(self) -> tuple[str, Any]:
        return "end", None

    def proxy_leak(self, elem: Token) -> tuple[str, Any]:
        return "leak", str(elem)

    # ---- ncclras text report (spec 2.13)

    def ras_version(self, line: Token) -> tuple[str, Any]:
        return "version", line.split()[2]

    def ras_skip(self, _line: Token) -> tuple[str, Any]:
        return "skip", None

    def ras_record(self, line: Token) -> tuple[str, Any]:
        # "#0-0 (cf264af53edbe986) INCOMPLETE"
        where, digest, kinds = line.split()
        return "record", (where, digest[1:-1], kinds)

    def ras_rank(self, line: Token) -> tuple[str, Any]:
        # "Rank 21 [reported Remote process error ]-- GPU 5 managed by process 3487984 on node X",
        # "Rank 1 has launched up to operation 5 -- GPU 0 managed by process 649 on node X"
        head, _, tail = line.partition(" -- GPU ")
        words = head.split()
        what = " ".join(words[3:] if words[2:3] == ["reported"] else words[2:]) or "missing"
        gpu, _, where = tail.partition(" managed by process ")
        pid, _, node = where.partition(" on node ")
        return "rank", (int(words[1]), gpu.strip(), int(pid), node.strip(), what)

    def ras_process(self, line: Token) -> tuple[str, Any]:
        # "Process 3487984 on node 172.16.64.213 managing GPU 5"
        words = line.split()
        return "process", (int(words[1]), words[4], " ".join(words[7:]))

    def ras_missing(self, line: Token) -> tuple[str, Any]:
        return "missing", tuple(int(n) for n in _NUMBER.findall(line.partition(":")[2]))

    def ras_kind(self, line: Token) -> tuple[str, Any]:
        return "kind", str(line)

    def ras_text(self, line: Token) -> tuple[str, Any]:
        return "text", str(line)

    # ---- version, driver, environment

    def version(self, _kw: Token, text: Token) -> Message:
        version, _, cuda = text.partition("+cuda")
        return Message(NcclVersion, {"version": version, "cuda": cuda or None})

    def git_version(self, rest: Token) -> Message:
        return _note("git-version", ("version", rest.strip()))

    def cuda_driver(self, number: Token) -> Message:
        return Message(NcclCudaDriver, {"version": int(number)})

    def env(self, name: Token, _set: Token, value: Token | None) -> Message:
        # Integer parameters print "%lld." (spec 2.3): the final '.' is punctuation.
        text = "" if value is None else value.strip()
        if text.endswith(".") and _NUMBER.fullmatch(text[:-1]):
            text = text[:-1]
        return Message(NcclEnv, {"name": str(name), "value": text})

    # ---- communicator life cycle

    def comm_state(self, body: Token) -> Message:
        return comm_state_message(body)

    def comm_config(self, body: Token) -> Message:
        return comm_config_message(body)

    # ---- bootstrap, interfaces, network

    def bootstrap_using(self, _kw: Token, *ifaces: Token) -> Message:
        return Message(
            NcclInterface, {"role": "bootstrap", "interfaces": tuple(map(_iface, ifaces))}
        )

    def socket_using(self, _kw: Token, *ifaces: Token) -> Message:
        return Message(NcclInterface, {"role": "socket", "interfaces": tuple(map(_iface, ifaces))})

    def socket_threads(self, _kw: Token, threads: Token, sockets: Token) -> Message:
        return _note("socket-threads", ("threads", threads), ("sockets", sockets))

    def using_network(self, name: Token) -> Message:
        return Message(NcclNetwork, {"name": name.strip()})

    def ib_using(self, _kw: Token, *items: Token) -> Message:
        devices = tuple(t.partition("]")[2] for t in items if t.type == "IB_DEV")
        return Message(
            NcclNetDevices, {"transport": "IB", "devices": devices, "oob": _iface(items[-1])}
        )

    def ib_using_cut(self, _kw: Token, *items: Token) -> Message:
        # The device list of a line NCCL cut at 1023 bytes: no "; OOB" part.
        devices = tuple(t.partition("]")[2] for t in items)
        return Message(NcclNetDevices, {"transport": "IB", "devices": devices})

    def ib_no_device(self, _kw: Token) -> Message:
        return Message(NcclNetDevices, {"transport": "IB", "devices": ()})

    def plugin_loaded(self, head: Token, what: Token, name: Token, version: Token) -> Message:
        return self._plugin(head, name.strip(), f"Loaded {what} plugin {name.strip()} {version}")

    def plugin_note(self, head: Token, rest: Token) -> Message:
        return self._plugin(head, None, rest.strip())

    def plugin_event(self, what: Token, name: Token) -> Message:
        return Message(NcclNetPlugin, {"plugin": name.strip(), "message": f"{what} {name.strip()}"})

    def plugin_assigned(self, name: Token) -> Message:
        return Message(
            NcclNetPlugin, {"plugin": name.strip(), "message": f"Assigned NET plugin {name}"}
        )

    @staticmethod
    def _plugin(head: Token, plugin: str | None, message: str) -> Message:
        return Message(
            NcclNetPlugin, {"plugin": plugin, "message": message, "kind": head.split("/")[0]}
        )

    # ---- channels, rings, trees (spec 2.7, 2.8)

    def channel_line(self, _kw: Token, chan: Token, body: tuple[str, Any]) -> Message:
        channel, _, second = chan.partition("/")
        kind, data = body
        if kind == "graph":
            prev, me, nxt = data
            return _note(
                "graph-ring", ("channel", int(channel)), ("prev", prev), ("me", me), ("next", nxt)
            )
        ranks, truncated = data
        fields = {
            "channel": int(channel),
            "nchannels": int(second) if second else None,
            "ranks": ranks,
            "truncated": truncated,
        }
        return Message(NcclRing, fields)

    def ring_dump(self, *items: Token | None) -> tuple[str, Any]:
        truncated = items[-1] is not None
        return "dump", (tuple(int(t) for t in items[:-1] if t is not None), truncated)

    def graph_ring(self, prev: Token, me: Token, nxt: Token) -> tuple[str, Any]:
        return "graph", (int(prev), int(me), int(nxt))

    def channel_connect(self, head: Token, via: Token) -> Message:
        return connect_message(connect_row(head, via))

    def collnet_connect(self, head: Token, via: Token) -> Message:
        # "CollNet 00/0 : 0 [send] via": the rank talks to the network collective (-1).
        words = head.split()
        channel, _, second = words[1].partition("/")
        fields = {
            "channel": int(channel),
            "conn_index": int(second) if second else None,
            "from_rank": int(words[3]),
            "to_rank": -1,
            "direction": words[4][1:-1],
            "transport": via.strip(),
            "kind": "collnet",
        }
        return Message(NcclChannelConnect, fields)

    def trees(self, *items: Token) -> Message:
        return trees_message(items)

    def graph_tree(self, body: Token) -> Message:
        # "Tree 0 : 0 -> 1 -> 2/-1/-1": up -> me -> down0/down1/down2.
        channel, up, me, *down = (int(n) for n in _NUMBER.findall(body))
        return Message(NcclGraphTree, {"channel": channel, "up": up, "me": me, "down": tuple(down)})

    def topo_system(self, body: Token) -> Message:
        words = body.strip("= ").split()
        return _note("topo-system", *zip(words[2::2], words[3::2], strict=False))

    def topo_end(self, _body: Token) -> Message:
        return _note("topo-end")

    def topo_node(self, body: Token) -> Message:
        node, _, detail = body.strip().partition(" ")
        return _note("topo-node", ("node", node), ("detail", detail.strip("() ") or None))

    def topo_link(self, body: Token) -> Message:
        # "+ PCI[48.0] - GPU/0-18000 (0)"
        words = body.split()
        link, _, bw = words[1].partition("[")
        return _note("topo-link", ("link", link), ("bw", bw[:-1]), ("node", words[3]))

    def topo_paths(self, body: Token) -> Message:
        node, _, paths = body.partition(" :")
        return _note("topo-paths", ("node", node.strip()), ("paths", paths.strip()))

    def graph_pattern(self, body: Token) -> Message:
        pairs = [item.strip().partition(" ") for item in body.split(",")]
        return _note("graph-pattern", *((k, v) for k, _, v in pairs if v))

    def graph_channel(self, body: Token) -> Message:
        channel, _, nodes = body.partition(":")
        return _note("graph-channel", ("channel", int(channel)), ("nodes", nodes.strip()))

    def nvls_trees(self, body: Token) -> Message:
        return _note("nvls-trees", ("trees", body.partition(":")[2].strip()))

    def gdr(self, body: Token) -> Message:
        # "GPU Direct RDMA Enabled for GPU 0 / HCA 1a000 (distance 4 <= 5), read 1 mode Default"
        text = body.strip()
        head, _, target = text.partition("GPU Direct RDMA ")
        state, _, rest = target.partition(" for ")
        plugin = head.split("/")[1].split(":")[0].strip() if head else None
        return _note("gdr", ("enabled", int(state == "Enabled")), ("plugin", plugin), ("for", rest))

    def tuning_other(self, body: Token) -> Message:
        name, _, rest = body.strip().partition(": ") if "]: " in body else ("", "", body.strip())
        nbytes, _, choice = rest.partition(" Bytes -> ")
        return _note("tuning", ("op", name or None), ("bytes", nbytes), ("choice", choice))

    def proxy_note(self, body: Token) -> Message:
        return _note("proxy", ("message", body.strip()))

    def proxy_step(self, body: Token) -> Message:
        # "sendProxy [96/0/128] Isend posted, ...": the step counters of one request (2.10).
        side, _, rest = body.strip().partition(" [")
        steps, _, what = rest.partition("] ")
        return _note("proxy-progress", ("side", side), ("steps", steps), ("message", what))

    def ras_note(self, body: Token) -> Message:
        text = body.strip()
        peer = re.search(r"[^\s<>]+<\d+>", text)
        event = "dead-peer" if " as DEAD" in text or "considered dead" in text else None
        if event is None and "timeout" in text:
            event = "timeout"
        return _note(
            "ras", ("event", event), ("peer", peer.group() if peer else None), ("message", text)
        )

    def nvls_note(self, body: Token) -> Message:
        return _note("nvls", ("message", body.strip()))

    def algo_matrix(self, body: Token) -> Message:
        return _note("algo-matrix", ("matrix", body.partition(":")[2].strip()))

    def collnet_graph(self, body: Token) -> Message:
        channel, rank, up, down = _NUMBER.findall(body)
        return _note(
            "collnet-graph", ("channel", channel), ("rank", rank), ("up", up), ("down", down)
        )

    def connected(self, what: Token, pxn: Token | None, gdr: Token | None) -> Message:
        return Message(NcclConnected, {"what": str(what), "pxn": _int(pxn), "gdr": _int(gdr)})

    def connected_collnet(self, _rank: Token) -> Message:
        return Message(NcclConnected, {"what": "CollNet"})

    # ---- collectives (spec 2.9)

    def coll(self, body: Token) -> Message:
        return coll_message(body)

    def tuning(
        self, name: Token, nbytes: Token, algo: Token, proto: Token, _rest: Token | None
    ) -> Message:
        return _note("tuning", ("op", name), ("bytes", nbytes), ("algo", algo), ("proto", proto))

    # ---- located messages: back-traces and INFO_LOC (spec 2.1, 1.9)

    def error_trace(self, body: Token) -> Message:
        # "file:line [(func)] -> code [thread tag] [(strerror)]"
        where, _, tail = body.strip().partition(" -> ")
        loc, _, func = where.partition(" ")
        file, _, line_no = loc.rpartition(":")
        code, _, tail = tail.partition(" ")
        thread = error = None
        if tail.startswith("["):
            thread, _, tail = tail[1:].partition("]")
            tail = tail.strip()
        if tail.startswith("("):
            error = tail[1:-1]
        fields = {
            "file": file,
            "line_no": int(line_no),
            "code": int(code),
            "thread": thread,
            "func": func[1:-1] or None,
            "error": error,
        }
        return Message(NcclErrorTrace, fields)

    def located(self, loc: Token, _func: Token | None, body: tuple[str, Any]) -> Message | None:
        file, _, line_no = loc.rpartition(":")
        kind, data = body
        if kind == "cuda":
            code, error = data
            return _note(
                "cuda-failure", ("file", file), ("line", line_no), ("code", code), ("error", error)
            )
        message: Message | None = data
        return message

    def cuda_failure_info(self, code: Token | None, quoted: Token) -> tuple[str, Any]:
        return "cuda", (_tok(code), quoted.strip()[1:-1])

    def loc_message(self, message: Message | None) -> tuple[str, Any]:
        return "message", message

    # ---- runtime INFO notes

    def connect_retry_old(self, call: Token, error: Token, _rest: Token | None) -> Message:
        return _note("connect-retry", ("call", call), ("error", error.strip()))

    def connect_retry(
        self,
        func: Token,
        _connect: Token,
        peer: Token | None,
        error: Token,
        count: Token,
        sleep: Token,
    ) -> Message:
        attempt, _, limit = count[1:-1].partition("/")
        return _note(
            "connect-retry",
            ("call", "connect"),
            ("func", func[:-1]),
            ("peer", _tok(peer)),
            ("error", error.strip()),
            ("attempt", attempt),
            ("max", limit),
            ("sleep_ms", sleep),
        )

    def service_closed(self, local_rank: Token) -> Message:
        return _note("service-thread-closed", ("local_rank", local_rank))

    def channels_summary(self, *items: Token) -> Message:
        pairs = [
            (items[i + 1].replace(" channels", "").replace(" ", "_"), items[i])
            for i in range(0, len(items), 2)
        ]
        return _note("channels-summary", *pairs)

    def thresholds(self, rest: Token) -> Message:
        return _note("threshold", ("thresholds", rest.strip()))

    def affinity(self, gpu: Token, rest: Token) -> Message:
        return _note("affinity", ("gpu", gpu), ("affinity", rest.strip()))

    def nvls_support(self, available: Token, dev: Token, _rest: Token | None) -> Message:
        return _note("nvls-support", ("available", int(available == "available")), ("dev", dev))

    def p2p_chunksize(self, size: Token) -> Message:
        return _note("p2p-chunksize", ("chunksize", size))

    def bootstrap_split(self, *values: Token | None) -> Message:
        comm, parent, rank, nranks, color, key, prev, nxt = values
        return _note(
            "bootstrap-split",
            ("comm", comm),
            ("parent", parent),
            ("rank", rank),
            ("nranks", nranks),
            ("color", color),
            ("key", key),
            ("prev", prev),
            ("next", nxt),
        )

    def net_plugin_version(self, version: Token) -> Message:
        return _note("net-plugin-version", ("version", version))

    def threads_2_4(self, threads: Token, comp_cap: Token, trees: Token) -> Message:
        return _note("threads", ("threads", threads), ("min_comp_cap", comp_cap), ("trees", trees))

    def comm_config_value(self, name: Token, value: Token) -> Message:
        return _note("comm-config", ("name", name), ("value", value.strip()))

    def init_timings(self, head: Token, rest: Token) -> Message:
        api = head[len("Init timings - ") : -1] if " - " in head else None
        return _note("init-timings", ("api", api), ("timings", rest.strip()))

    def nic_distance(self, head: Token, distance: Token) -> Message:
        words = head.split()
        gpu, _, dev = words[2].partition("[")
        return _note(
            "nic-distance",
            ("gpu", gpu),
            ("dev", dev.rstrip("],")),
            ("transport", words[3]),
            ("distance", distance),
        )

    def net_note(self, head: Token, rest: Token) -> Message:
        return _note("net-plugin", ("plugin", head[4:].rstrip(" :")), ("message", rest.strip()))

    def comm_cut(self, body: Token) -> Message:
        return _note("comm-truncated", ("comm", body.split()[1]), ("text", body.strip()))

    def unknown_msg(self, _rest: Token) -> None:
        return None

    # ---- WARN families (spec 2.11, 2.12)

    def duplicate_gpu(self, rank: Token, other: Token, bus_id: Token) -> Message:
        return _warn("duplicate-gpu", ("rank", rank), ("other_rank", other), ("bus_id", bus_id))

    def multi_rank_gpu(self, _what: Token, _rest: Token | None) -> Message:
        return _warn("duplicate-gpu")

    def ib_completion(
        self, _head: Token, peer: Token | None, *items: tuple[str, str] | None
    ) -> Message:
        pairs: list[tuple[str, object]] = [("peer", _tok(peer))]
        pairs.extend(item for item in items if item is not None)
        return _warn("ib-completion", *pairs)

    def ib_status(self, value: Token) -> tuple[str, str]:
        return self._ib_value("status", value)

    def ib_opcode(self, value: Token) -> tuple[str, str]:
        return self._ib_value("opcode", value)

    @staticmethod
    def _ib_value(key: str, value: Token) -> tuple[str, str]:
        # 2.28.7+ prints "status=IBV_WC_RETRY_EXC_ERR(12)": keep the number as the value.
        named = _IB_VALUE.match(value)
        return (key, named.group(2)) if named else (key, str(value))

    def ib_len(self, value: Token) -> tuple[str, str]:
        return "len", str(value)

    def ib_vendor_err(self, value: Token) -> tuple[str, str]:
        return "vendor_err", str(value)

    def ib_req_type(self, value: Token) -> tuple[str, str]:
        return "req_type", value.strip("()")

    def ib_local_gid(self, value: Token) -> tuple[str, str]:
        return "local_gid", str(value)

    def ib_remote_gid(self, value: Token) -> tuple[str, str]:
        return "remote_gid", str(value)

    def ib_hca(self, value: Token) -> tuple[str, str]:
        return "hca", str(value)

    def ib_skip(self, _word: Token) -> None:
        return None

    def ib_other(self, _head: Token, _rest: Token) -> Message:
        return _warn("ib")

    def socket_warn(self, func: Token | None, _net: Token | None, body: Message) -> Message:
        if func is None:
            return body
        fields = (("func", func[:-1]), *body.fields["fields"])
        return Message(NcclWarn, {"family": body.fields["family"], "fields": fields})

    def sock_connect_failed(self, _kw: Token, peer: Token, error: Token) -> Message:
        return _warn("socket", ("op", "connect"), ("peer", peer), ("error", error.strip()))

    def sock_connect_returned(self, _kw: Token, peer: Token | None, rest: Token) -> Message:
        error, _, attempts = rest.strip().partition(", exceeded error retry count")
        tries = _NUMBER.search(attempts)
        return _warn(
            "socket",
            ("op", "connect"),
            ("peer", _tok(peer)),
            ("error", error),
            ("attempts", tries.group(0) if tries else None),
        )

    def sock_closed(self, peer: Token | None) -> Message:
        return _warn(
            "socket",
            ("op", "recv"),
            ("peer", _tok(peer)),
            ("error", "Connection closed by remote peer"),
        )

    def call_failed(
        self, call: Token, prep: Token | None, peer: Token | None, error: str | None
    ) -> Message:
        name = str(call)
        if name.startswith("ibv_"):
            return _warn("ib", ("op", name), ("error", error))
        family = "socket" if name in _SOCKET_CALLS else "other"
        return _warn(family, ("op", name), ("peer", _tok(peer)), ("error", error))

    def call_error(self, rest: Token) -> str:
        return rest.strip()

    def sock_accept_failed(self, error: Token) -> Message:
        return _warn("socket", ("op", "accept"), ("error", error.strip()))

    def sock_exceeded(self, kind: Token, _rest: Token | None) -> Message:
        family = "timeout" if kind == "timeouts" else "socket"
        return _warn(family, ("op", "connect"), ("error", f"exceeded {kind}"))

    def sock_poll_failed(self, _func: Token, peer: Token, error: Token) -> Message:
        return _warn("socket", ("op", "connect"), ("peer", peer), ("error", error.strip()))

    def cuda_failure(self, code: Token | None, quoted: Token, _rest: Token | None) -> Message:
        return _warn("cuda", ("code", _tok(code)), ("error", quoted.strip()[1:-1]))

    def cuda_alloc(self, what: Token, size: Token) -> Message:
        return _warn("cuda", ("op", what.rpartition("CUDA ")[2]), ("size", size))

    def nvls_bind(self, size: Token, code: Token, quoted: Token, _rest: Token | None) -> Message:
        error = quoted.strip()[1:-1]
        return _warn("cuda", ("size", size), ("code", code), ("error", error), continuation=2)

    def shm_error(self, rest: Token) -> tuple[str, str | None]:
        return _errno_split(rest.strip())

    def _shm(
        self, op: str, path: Token, size: Token | None, error: tuple[str, str | None] | None
    ) -> Message:
        text, errno = error if error is not None else (None, None)
        return _warn(
            "shm",
            ("op", op),
            ("path", path),
            ("size", _tok(size)),
            ("error", text),
            ("errno", errno),
        )

    def shm_extend(
        self, _err: Token | None, path: Token, size: Token, error: tuple[str, str | None] | None
    ) -> Message:
        return self._shm("extend", path, size, error)

    def shm_segment(
        self, action: Token, path: Token, size: Token, error: tuple[str, str | None] | None
    ) -> Message:
        return self._shm(str(action).split()[0], path, size, error)

    def shm_map(
        self,
        _err: Token | None,
        path: Token,
        size: Token | None,
        error: tuple[str, str | None] | None,
    ) -> Message:
        return self._shm("map", path, size, error)

    def shm_create(
        self, _err: Token | None, path: Token, error: tuple[str, str | None] | None
    ) -> Message:
        return self._shm("create", path, None, error)

    def proxy_recv(self, op_id: Token | None) -> Message:
        return _warn(
            "proxy", ("op", "recv"), ("op_id", _tok(op_id)), ("error", "Socket recv failed")
        )

    def proxy_execute(self, tag: Token, operation: Token, rank: Token, retcode: Token) -> Message:
        return _warn("proxy", ("operation", operation), ("rank", rank), ("retcode", retcode))

    def proxy_service(self, _rest: Token) -> Message:
        return _warn("proxy")

    def proxy_call(self, rank: Token, _rest: Token | None) -> Message:
        return _warn("proxy", ("rank", rank))

    def abort_state(self, comm: Token) -> Message:
        return _warn("abort", ("comm", comm))

    def async_error(self, comm: Token, state: Token) -> Message:
        return _warn("abort", ("comm", comm), ("state", state))

    def net_socket(self, _head: Token, _rest: Token) -> Message:
        return _warn("net")

    def net_failure(self, _what: Token, _rest: Token | None) -> Message:
        return _warn("net")

    def warn_async(self, what: Token, _rest: Token | None) -> Message:
        return _warn("abort", ("op", str(what).split(":")[0].split("(")[0].strip()))

    def warn_version(self, rest: Token) -> Message:
        # "NCCL version mismatch with remote peer 10.0.0.2<4000> (local: 22304, remote 22105)"
        text = rest.strip()
        peer, _, versions = text.partition(" (")
        numbers = re.findall(r"(?:local|remote):? ([\w.]+)", versions)
        local, remote = [*numbers, None, None][:2]
        return _warn("version", ("peer", peer), ("local", local), ("remote", remote))

    def warn_mismatch(self, _what: Token, rest: Token) -> Message:
        rank = re.search(r"rank (\d+)", rest)
        return _warn("collective-mismatch", ("rank", rank.group(1) if rank else None))

    def unknown_warn(self, _rest: Token) -> Message:
        return _warn("other")

    # ---- CALL (spec 2.2)

    def call(self, func: Token, args: Token) -> Message:
        inner = args[1:-1].strip()
        values = tuple(a.strip() for a in inner.split(",")) if inner else ()
        return Message(NcclCall, {"func": str(func), "args": values})
