"""Render a diagnosis as the ``logsleuth.diagnosis/1`` JSON document of CONTRACT section 3."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from logsleuth.model.diagnosis import (
    CommProgress,
    CommunicatorView,
    ConfigEntry,
    Diagnosis,
    Evidence,
    Finding,
    FirstError,
    InputView,
    JobView,
    RankView,
    StackClass,
    StackSuspect,
    StackTreeNode,
    Verdict,
)
from logsleuth.model.ranks import format_ranks
from logsleuth.model.topology import TopologyView
from logsleuth.model.waitfor import WaitFor

SCHEMA = "logsleuth.diagnosis/1"
GENERATOR = "logsleuth"


def _confidence(value: float) -> float:
    # Two decimals: more digits would suggest a precision the rules do not have, and
    # rounding keeps the output stable across float noise in the scoring arithmetic.
    return round(value, 2)


def _verdict(v: Verdict) -> dict[str, object]:
    return {
        "kind": v.kind,
        "summary": v.summary,
        "code": v.code,
        "culprit_ranks": sorted(set(v.culprit_ranks)),
        "culprit_hosts": sorted(set(v.culprit_hosts)),
        "culprit_pids": sorted(set(v.culprit_pids)),
        "confidence": _confidence(v.confidence),
    }


def _evidence(e: Evidence) -> dict[str, object]:
    return {
        "source": e.source,
        "line": e.line,
        "text": e.text,
        "context": [{"line": line, "text": text} for line, text in e.context],
    }


def _finding(f: Finding) -> dict[str, object]:
    return {
        "code": f.code,
        "name": f.name,
        "kind": f.kind,
        "severity": f.severity,
        "title": f.title,
        "detail": f.detail,
        "ranks": sorted(set(f.ranks)),
        "hosts": sorted(set(f.hosts)),
        "pids": sorted(set(f.pids)),
        "communicator": f.communicator,
        "confidence": _confidence(f.confidence),
        # Evidence stays in the rule's order: strongest line first.
        "evidence": [_evidence(e) for e in f.evidence],
        "evidence_total": max(f.evidence_total, len(f.evidence)),
        "next_steps": list(f.next_steps),
    }


def _job(j: JobView) -> dict[str, object]:
    versions = sorted(j.nccl_versions)
    return {
        "world_size": j.world_size,
        "hosts": sorted(set(j.hosts)),
        "nccl_versions": {version: sorted(set(ranks)) for version, ranks, _ in versions},
        "nccl_version_hosts": {version: sorted(set(hosts)) for version, _, hosts in versions},
        "torch_version": j.torch_version,
        "launcher": j.launcher,
        "time_range": list(j.time_range) if j.time_range is not None else None,
        "host_aliases": {host: sorted(set(names)) for host, names in sorted(j.host_aliases)},
    }


def _communicator(c: CommunicatorView) -> dict[str, object]:
    return {
        "id": c.id,
        "nranks": c.nranks,
        "ranks_seen": c.ranks_seen,
        "init_complete": c.init_complete,
        "init_missing": c.init_missing,
        "hosts": sorted(set(c.hosts)),
        "aborted": c.aborted,
        "last_op_counts": [
            {"ranks": ranks, "op_count": op_count, "collective": collective}
            for ranks, op_count, collective in c.last_op_counts
        ],
        "channels": c.channels,
        "transports": {name: count for name, count in sorted(c.transports)},
    }


def communicator_entries(d: Diagnosis) -> list[dict[str, Any]]:
    """Return ``communicators[]``, each with its rebuilt ``topology`` (or null).

    A topology whose communicator has no entry of its own (split children that share one
    commId, connection lines without an Init line) gets an entry with what it knows.
    """
    views = {t.id: t for t in d.topology}
    entries = []
    for c in d.communicators:
        entry = _communicator(c)
        view = views.pop(c.id, None)
        entry["topology"] = _topology(view) if view is not None else None
        entries.append(entry)
    for view in d.topology:
        if view.id not in views:
            continue
        entries.append(
            {
                "id": view.id,
                "nranks": view.nranks,
                "ranks_seen": format_ranks(r.rank for r in view.ranks),
                "init_complete": "",
                "init_missing": "",
                "hosts": sorted({h.name for h in view.hosts}),
                "aborted": "",
                "last_op_counts": [],
                "channels": view.channels,
                "transports": {name: count for name, count in sorted(view.transports)},
                "topology": _topology(view),
            }
        )
    return entries


def _topology(t: TopologyView) -> dict[str, object]:
    return {
        "id": t.id,
        "nranks": t.nranks,
        "channels": t.channels,
        "trees": t.trees,
        "aggregated": t.aggregated,
        "hosts": [
            {
                "name": h.name,
                "address": h.address,
                "ranks": format_ranks(h.ranks),
                "nics": list(h.nics),
                "network": h.network,
                "anomalous": h.anomalous,
            }
            for h in t.hosts
        ],
        "ranks": [
            {
                "rank": r.rank,
                "global_rank": r.global_rank,
                "host": r.host,
                "pid": r.pid,
                "cuda_dev": r.cuda_dev,
                "nvml_dev": r.nvml_dev,
                "bus_id": r.bus_id,
                "channels": r.channels,
                "connected_rings": r.connected_rings,
                "anomalous": r.anomalous,
            }
            for r in t.ranks
        ],
        "rings": [{"channel": channel, "order": list(order)} for channel, order in t.rings],
        "transports": {name: count for name, count in sorted(t.transports)},
        "links": [
            {
                "src": k.src,
                "dst": k.dst,
                "transport": k.transport,
                "detail": k.detail,
                "channels": k.channels,
                "anomalous": k.anomalous,
            }
            for k in t.links
        ],
        "anomalies": [
            {
                "code": a.code,
                "kind": a.kind,
                "text": a.text,
                "hosts": sorted(set(a.hosts)),
                "ranks": sorted(set(a.ranks)),
            }
            for a in t.anomalies
        ],
    }


def _stack_class(s: StackClass) -> dict[str, object]:
    return {
        "ranks": s.ranks,
        "count": s.count,
        "frames": list(s.frames),
        "category": s.category,
        "call_site": s.call_site,
        "collective": s.collective,
        "pids": sorted(set(s.pids)),
        "hosts": sorted(set(s.hosts)),
        "libraries": list(s.libraries),
    }


def _stack_tree(node: StackTreeNode) -> dict[str, object]:
    return {
        "frame": node.frame,
        "count": node.count,
        "ranks": format_ranks(node.ranks),
        "pids": list(node.pids),
        "library": node.library,
        "category": node.category,
        "collective": node.collective,
        "call_site": node.call_site,
        "suspect": node.suspect,
        "children": [_stack_tree(child) for child in node.children],
    }


def _stack_suspect(s: StackSuspect, classes: tuple[StackClass, ...]) -> dict[str, object]:
    return {"class_index": classes.index(s.stack_class), "kind": s.kind, "reason": s.reason}


def _stacks(d: Diagnosis) -> dict[str, object]:
    """Return ``stacks``: the classes, their merged tree and the suspects among them."""
    return {
        "classes": [_stack_class(s) for s in d.stack_classes],
        "tree": _stack_tree(d.stack_tree) if d.stack_tree is not None else None,
        "suspects": [_stack_suspect(s, d.stack_classes) for s in d.stack_suspects],
    }


def _rank(r: RankView) -> dict[str, object]:
    return {
        "rank": r.rank,
        "host": r.host,
        "pid": r.pid,
        "devices": list(r.devices),
        "bus_ids": list(r.bus_ids),
        "nccl_version": r.nccl_version,
        "sources": list(r.sources),
        "last_collective": r.last_collective,
        "state": r.state,
        "first_error": r.first_error,
    }


def _progress(p: CommProgress) -> dict[str, object]:
    return {
        "communicator": p.id,
        "nranks": p.nranks,
        "members": p.members,
        "laggards": p.laggards,
        "groups": [
            {
                "ranks": g.ranks,
                "count": g.count,
                "op_count": g.op_count,
                "collective": g.collective,
                "behind": g.behind,
            }
            for g in p.groups
        ],
    }


def _first_error(e: FirstError) -> dict[str, object]:
    return {
        "kind": e.kind,
        "message": e.message,
        "ranks": e.ranks,
        "processes": e.processes,
        "hosts": sorted(set(e.hosts)),
        "time": e.time,
        "last_time": e.last_time,
        "evidence": _evidence(e.evidence) if e.evidence is not None else None,
    }


def _config(c: ConfigEntry) -> dict[str, object]:
    return {
        "key": c.key,
        "differs": c.differs,
        "unset": c.unset,
        "values": [
            {"value": v.value, "ranks": v.ranks, "processes": v.processes, "hosts": list(v.hosts)}
            for v in c.values
        ],
    }


def _input(i: InputView) -> dict[str, object]:
    return {
        "source": i.source,
        "kind": i.kind,
        "lines": i.lines,
        "recognized": i.recognized,
        "unrecognized": i.unrecognized,
        "blank": i.blank,
        "error": i.error,
    }


def build_json(d: Diagnosis) -> dict[str, object]:
    """Build the diagnosis document as plain JSON values.

    Record lists (findings, communicators, stack classes, ranks, inputs) keep the order the
    analysis gave them, which is deterministic and meaningful (most severe first); lists
    that are sets (ranks, hosts, pids) are sorted.
    """
    document: dict[str, object] = {
        "schema": SCHEMA,
        "generator": {"name": GENERATOR, "version": d.version},
        "verdict": _verdict(d.verdict),
        "findings": [_finding(f) for f in d.findings],
        "job": _job(d.job),
        "communicators": communicator_entries(d),
        "stacks": _stacks(d),
        "ranks": [_rank(r) for r in d.ranks],
        "inputs": [_input(i) for i in d.inputs],
        "gaps": list(d.gaps),
        "progress": [_progress(p) for p in d.progress],
        "timeline": [_first_error(e) for e in d.timeline],
        "config": [_config(c) for c in d.config],
    }
    # null where no process is known to wait for another (every key is always present).
    document["waitfor"] = _waitfor(d.waitfor) if d.waitfor is not None else None
    # null where no source shows a point-to-point op.
    document["p2p"] = _plain(d.p2p) if d.p2p is not None else None
    return document


def _plain(value: object) -> object:
    """Return a model value as JSON values, field by field (tuples become lists)."""
    if isinstance(value, Evidence):
        return _evidence(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


MAX_WAIT_EDGES = 64
"""Edges listed in ``waitfor.edges``: those into the culprits first; ``edges_total`` counts all."""


def _waitfor(w: WaitFor) -> dict[str, object]:
    """Return the wait-for graph: every node, the edges that matter, culprits and victims."""
    culprits = set(w.culprits)
    in_cycle = {n for c in w.cycles for n in c}
    relevant = [e for e in w.edges if e.waits_for in culprits or e.waiter in culprits]
    relevant += [e for e in w.edges if e not in relevant and e.waits_for in in_cycle]
    return {
        "nodes": [
            {
                "id": n.id,
                "rank": n.rank,
                "host": n.host,
                "pid": n.pid,
                "state": n.state,
                "where": n.where,
            }
            for n in w.nodes
        ],
        "edges": [
            {
                "waiter": e.waiter,
                "waits_for": e.waits_for,
                "reason": e.reason,
                "source": e.source,
                "evidence": _evidence(e.evidence) if e.evidence is not None else None,
            }
            for e in relevant[:MAX_WAIT_EDGES]
        ],
        "edges_total": len(w.edges),
        "culprits": list(w.culprits),
        "victims": [{"node": node, "reason": reason} for node, reason in w.victims],
        "cycles": [list(c) for c in w.cycles],
        "resolution": w.resolution,
    }


def dumps_canonical(value: object, *, indent: int | None = 2) -> str:
    """Serialize JSON values with sorted keys and ASCII-only output; compact without indent.

    ASCII escapes keep the bytes identical whatever the locale of the terminal or file,
    and survive undecodable log bytes that were carried through as surrogates.
    """
    separators = (",", ": ") if indent is not None else (",", ":")
    return json.dumps(
        value, indent=indent, separators=separators, sort_keys=True, ensure_ascii=True
    )


def render_json(d: Diagnosis) -> str:
    """Render the diagnosis as indented, key-sorted JSON ending in a newline."""
    return dumps_canonical(build_json(d)) + "\n"
