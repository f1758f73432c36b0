"""The topology section of the HTML report: which communicators to draw, and how.

The culprit's communicator comes first and open, with its GPU, host and links highlighted;
a communicator on more hosts than fit a drawing shows the culprit's neighbourhood, its
transport counts and its anomalies; rings and trees are listed on demand.
"""

from __future__ import annotations

from dataclasses import replace

from markupsafe import Markup

from logsleuth.model.diagnosis import Diagnosis
from logsleuth.model.ranks import format_ranks
from logsleuth.model.topology import TopologyView
from logsleuth.report import common
from logsleuth.report.topology_svg import render_topology_svg, topology_summary

DRAWN_TOPOLOGIES = 4
"""Topology drawings on the page; the others are listed by their one-line summary."""
LISTED_TOPOLOGIES = 200
OPEN_TOPOLOGY_RANKS = 256
"""Larger communicators' drawings start collapsed: the browser lays them out only on demand."""
DRAWN_HOSTS = 64
"""Communicators on more hosts are summarized (transport counts, anomalies), not drawn."""
LISTED_RINGS = 16
RING_RANKS = 64


def _culprit_ranks(t: TopologyView, d: Diagnosis) -> frozenset[int]:
    """Return the communicator ranks of ``t`` that the verdict blames (its ranks are global)."""
    blamed = set(d.verdict.culprit_ranks)
    if not blamed:
        return frozenset()
    world = t.nranks is not None and t.nranks == d.job.world_size
    return frozenset(
        r.rank
        for r in t.ranks
        if (r.global_rank in blamed) or (r.global_rank is None and world and r.rank in blamed)
    )


def _rings(t: TopologyView) -> list[str]:
    rings = []
    for channel, order in t.rings[:LISTED_RINGS]:
        shown = " > ".join(map(str, order[:RING_RANKS]))
        more = f" > ... ({len(order) - RING_RANKS} more)" if len(order) > RING_RANKS else ""
        rings.append(f"channel {channel}: {shown}{more}")
    return rings


def _culprit_links(t: TopologyView, culprits: frozenset[int]) -> list[str]:
    if not culprits:
        return []
    hosts = {h.name for h in t.hosts if culprits & set(h.ranks)}
    ends = {str(r) for r in culprits} | (hosts if t.aggregated else set())
    return [
        f"{k.src} -> {k.dst}: {k.detail} ({k.channels} channels)"
        + (" (anomalous)" if k.anomalous else "")
        for k in t.links
        if k.src in ends or k.dst in ends
    ][:LISTED_RINGS]


def _neighbourhood(t: TopologyView, culprits: frozenset[int]) -> TopologyView | None:
    """Return the culprit's hosts and the hosts their links join, for a drawing that fits.

    None when no culprit is in ``t``. Links between two other hosts are left out: the
    drawing answers where the culprit is and how it is connected.
    """
    near = {h.name for h in t.hosts if culprits & set(h.ranks)}
    if not near:
        return None
    ends = {str(r) for r in culprits} | near
    links = tuple(k for k in t.links if k.src in ends or k.dst in ends)
    by_rank = {str(r.rank): r.host for r in t.ranks}
    for k in links:
        for end in (k.src, k.dst):
            near.add(by_rank.get(end) or end)
    hosts = tuple(h for h in t.hosts if h.name in near)[:DRAWN_HOSTS]
    kept = {h.name for h in hosts}
    ranks = tuple(r for r in t.ranks if r.host in kept)
    return replace(t, hosts=hosts, ranks=ranks, links=links)


def topology_view(d: Diagnosis) -> dict[str, object]:
    """Draw the culprit's, the anomalous and the largest communicators; list the others.

    The culprit's communicator comes first and open, its GPU, host and links highlighted.
    A communicator on more than :data:`DRAWN_HOSTS` hosts is summarized instead of drawn:
    transports with their counts, anomalies, the culprit's host and links.
    """
    primary = common.primary_finding(d)
    focus = primary.communicator if primary is not None else None
    blamed = {t.id: _culprit_ranks(t, d) for t in d.topology}

    def order(t: TopologyView) -> tuple[bool, bool, int, str]:
        ours = bool(blamed[t.id]) or t.id == focus
        return (not ours, not t.anomalies, -(t.nranks or len(t.ranks)), t.id)

    ranked = sorted(d.topology, key=order)
    drawn = ranked[:DRAWN_TOPOLOGIES]
    rest = ranked[DRAWN_TOPOLOGIES:]
    has_culprit = any(blamed[t.id] for t in drawn)
    views = []
    for i, t in enumerate(drawn):
        culprits = blamed[t.id]
        small = len(t.hosts) <= DRAWN_HOSTS
        size = t.nranks or len(t.ranks)
        part = None if small else _neighbourhood(t, culprits)
        svg = ""
        if small:
            svg = render_topology_svg(t, culprits)
        elif part is not None:
            svg = render_topology_svg(part, culprits, part_of=len(t.hosts))
        views.append(
            {
                "anchor": f"topo-{i + 1}",
                "id": t.id,
                "summary": topology_summary(t),
                "svg": Markup(svg),
                "partial": part is not None,
                "open": bool(culprits) or (not has_culprit and size <= OPEN_TOPOLOGY_RANKS),
                "culprit": bool(culprits),
                "culprit_ranks": format_ranks(culprits),
                "culprit_hosts": ", ".join(h.name for h in t.hosts if culprits & set(h.ranks)),
                "hosts": len(t.hosts),
                "transports": [f"{name}: {count:,}" for name, count in t.transports],
                "anomalies": [f"{a.code} {a.text}" for a in t.anomalies],
                "culprit_links": _culprit_links(t, culprits),
                "rings": _rings(t),
                "rings_more": max(0, len(t.rings) - LISTED_RINGS),
                "trees": t.trees,
            }
        )
    return {
        "views": views,
        "listed": [topology_summary(t) for t in rest[:LISTED_TOPOLOGIES]],
        "listed_more": max(0, len(rest) - LISTED_TOPOLOGIES),
        "count": len(d.topology),
    }
