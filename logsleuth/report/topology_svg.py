"""Draw a communicator's topology as an SVG: hosts as boxes, GPUs inside, rings by transport.

The drawing takes only the model view (:class:`~logsleuth.model.topology.TopologyView`).
It uses presentation attributes, never ``style`` attributes or scripts, so the HTML report's
Content-Security-Policy holds when it is inlined. Large communicators arrive aggregated
(links between hosts); their GPUs are drawn as small squares.
"""

from __future__ import annotations

import math
from html import escape

from logsleuth.model.ranks import format_ranks
from logsleuth.model.topology import TopoHost, TopoLink, TopologyView, TopoRank, pretty_bus_id

COLOURS = {
    "P2P": "#2e7d32",
    "SHM": "#00838f",
    "NET/IB": "#1565c0",
    "NET": "#6a1b9a",
    "NET/Socket": "#ef6c00",
    "COLLNET": "#795548",
    "other": "#757575",
}
"""Link colour per transport family."""
ANOMALY = "#c62828"
CULPRIT = "#d50000"
"""The verdict's culprit: its GPU, its host box and its links."""
MAX_WIDTH = 1200
PAD = 16


def _colour(family: str) -> str:
    return COLOURS.get(family, COLOURS["other"])


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


class _Layout:
    """Positions of host boxes and GPU cells."""

    def __init__(self, view: TopologyView) -> None:
        self.small = view.aggregated
        most = max((len(h.ranks) for h in view.hosts), default=1)
        self.per_row = min(16 if self.small else 8, max(most, 1))
        self.cell_w, self.cell_h, self.gap = (8, 8, 3) if self.small else (36, 26, 8)
        rows = max(1, math.ceil(most / self.per_row))
        self.box_w = 2 * PAD + self.per_row * (self.cell_w + self.gap) - self.gap
        self.box_w = max(self.box_w, 150)
        self.box_h = 40 + rows * (self.cell_h + self.gap) + (14 if self.small else 0)
        self.hgap = 60 if not self.small else 30
        self.cols = max(1, min(len(view.hosts), (MAX_WIDTH - PAD) // (self.box_w + self.hgap)))
        self.intra: dict[str, list[TopoLink]] = {}
        for link in view.links:
            if link.src == link.dst:
                self.intra.setdefault(link.src, []).append(link)
        self.host_pos: dict[str, tuple[float, float]] = {}
        self.rank_pos: dict[int, tuple[float, float]] = {}
        top = 56.0
        for i, host in enumerate(view.hosts):
            x = PAD + (i % self.cols) * (self.box_w + self.hgap)
            y = top + (i // self.cols) * (self.box_h + self.hgap)
            self.host_pos[host.name] = (x, y)
            for j, rank in enumerate(host.ranks):
                cx = x + PAD + (j % self.per_row) * (self.cell_w + self.gap)
                cy = y + 32 + (j // self.per_row) * (self.cell_h + self.gap)
                self.rank_pos[rank] = (cx, cy)
        rows_of_hosts = max(1, math.ceil(len(view.hosts) / self.cols))
        self.width = PAD * 2 + self.cols * (self.box_w + self.hgap) - self.hgap
        self.width = max(self.width, 560)
        self.height = top + rows_of_hosts * (self.box_h + self.hgap) - self.hgap + PAD

    def rank_centre(self, rank: int) -> tuple[float, float]:
        x, y = self.rank_pos[rank]
        return x + self.cell_w / 2, y + self.cell_h / 2

    def host_centre(self, name: str) -> tuple[float, float]:
        x, y = self.host_pos[name]
        return x + self.box_w / 2, y + self.box_h / 2


def _rank_title(rank: TopoRank) -> str:
    parts = [f"rank {rank.rank}"]
    if rank.global_rank is not None and rank.global_rank != rank.rank:
        parts.append(f"global rank {rank.global_rank}")
    if rank.host:
        parts.append(rank.host + (f" pid {rank.pid}" if rank.pid is not None else ""))
    if rank.cuda_dev is not None:
        parts.append(f"cudaDev {rank.cuda_dev}")
    if rank.nvml_dev is not None:
        parts.append(f"nvmlDev {rank.nvml_dev}")
    if rank.bus_id:
        parts.append(f"busId {pretty_bus_id(rank.bus_id)}")
    if rank.channels:
        parts.append(f"{rank.channels} channels")
    if rank.connected_rings is False:
        parts.append("never logged Connected all rings")
    return ", ".join(parts)


def _host_title(host: TopoHost) -> str:
    parts = [host.name]
    if host.address:
        parts.append(host.address)
    parts.append(f"ranks {format_ranks(host.ranks)}")
    if host.network:
        parts.append(f"network {host.network}")
    if host.nics:
        parts.append(f"{len(host.nics)} NICs")
    return ", ".join(parts)


def _curve(x1: float, y1: float, x2: float, y2: float, bend: float) -> str:
    """Return a quadratic path bent to the right of its direction, so A->B and B->A differ."""
    mx, my = (x1 + x2) / 2, (y1 + y2) / 2
    dx, dy = x2 - x1, y2 - y1
    length = math.hypot(dx, dy) or 1.0
    cx, cy = mx - dy / length * bend, my + dx / length * bend
    return f"M{x1:.0f},{y1:.0f} Q{cx:.0f},{cy:.0f} {x2:.0f},{y2:.0f}"


def topology_summary(view: TopologyView, *, limit: int = 4) -> str:
    """Return one line about ``view``: size, hosts, channels, transports with counts, anomalies."""
    size = view.nranks if view.nranks is not None else len(view.ranks)
    hosts = len(view.hosts)
    parts = [f"{size} ranks on {hosts} {'host' if hosts == 1 else 'hosts'}"]
    if view.channels:
        parts.append(f"{view.channels} channels")
    if view.trees:
        parts.append(f"{view.trees} trees")
    line = f"comm {view.id}: " + ", ".join(parts)
    if view.transports:
        shown = ", ".join(f"{name} x{count}" for name, count in view.transports[:limit])
        more = len(view.transports) - limit
        line += f"; transports {shown}" + (f" (+{more} more)" if more > 0 else "")
    if view.anomalies:
        line += "; anomalies: " + "; ".join(f"{a.code} {a.text}" for a in view.anomalies)
    else:
        line += "; no anomalies"
    return line


def _host_box(host: TopoHost, lay: _Layout, culprits: frozenset[int]) -> list[str]:
    hx, hy = lay.host_pos[host.name]
    stroke, width = (ANOMALY, "3") if host.anomalous else ("#90a4ae", "1")
    if culprits & set(host.ranks):
        stroke, width = CULPRIT, "3"
    # Small (aggregated) boxes say their ranks on the bottom line, beside the intra-host links.
    label = host.name
    if host.ranks and not lay.small:
        label = f"{host.name}  ranks {format_ranks(host.ranks)}"
    out = [
        f'<rect x="{hx:.0f}" y="{hy:.0f}" width="{lay.box_w}" height="{lay.box_h}" rx="6" '
        f'fill="#f5f7fa" stroke="{stroke}" stroke-width="{width}">'
        f"<title>{escape(_host_title(host))}</title></rect>",
        f'<text x="{hx + 8:.0f}" y="{hy + 16:.0f}" font-weight="bold">{escape(label)}</text>',
    ]
    if host.network:
        out.append(
            f'<text x="{hx + lay.box_w - 8:.0f}" y="{hy + 16:.0f}" text-anchor="end" '
            f'fill="{_colour(host.network)}">{escape(host.network)}</text>'
        )
    return out


def _gpu_cells(
    host: TopoHost, lay: _Layout, ranks: dict[int, TopoRank], culprits: frozenset[int]
) -> list[str]:
    out: list[str] = []
    for rank_no in host.ranks:
        rank = ranks.get(rank_no)
        if rank is None:
            continue
        rx, ry = lay.rank_pos[rank_no]
        fill = "#ffcdd2" if rank.anomalous else "#ffffff"
        edge = ANOMALY if rank.anomalous or rank.connected_rings is False else "#455a64"
        extra = ""
        title = _rank_title(rank)
        if rank_no in culprits:
            fill, edge, extra = "#ffeb3b", CULPRIT, ' stroke-width="3" class="culprit"'
            title = f"the culprit: {title}"
        out.append(
            f'<rect x="{rx:.0f}" y="{ry:.0f}" width="{lay.cell_w}" height="{lay.cell_h}" '
            f'fill="{fill}" stroke="{edge}"{extra}><title>{escape(title)}</title></rect>'
        )
        if not lay.small:
            out.append(
                f'<text x="{rx + lay.cell_w / 2:.0f}" y="{ry + 17:.0f}" '
                f'text-anchor="middle">{rank_no}</text>'
            )
    if lay.small:
        hx, hy = lay.host_pos[host.name]
        intra = lay.intra.get(host.name, [])
        parts = [f"ranks {format_ranks(host.ranks)}"] if host.ranks else []
        parts += [f"{link.transport} x{link.channels}" for link in intra]
        label = "; ".join(parts)
        out.append(f'<text x="{hx + 8:.0f}" y="{hy + lay.box_h - 8:.0f}">{escape(label)}</text>')
    return out


def _touches(link: TopoLink, view: TopologyView, culprits: frozenset[int]) -> bool:
    """Say whether ``link`` joins a culprit rank (or, aggregated, the culprit's host)."""
    if not culprits:
        return False
    if view.aggregated:
        hosts = {h.name for h in view.hosts if culprits & set(h.ranks)}
        return link.src in hosts or link.dst in hosts
    return any(end.isdigit() and int(end) in culprits for end in (link.src, link.dst))


def _link_paths(
    view: TopologyView, lay: _Layout, ranks: dict[int, TopoRank], culprits: frozenset[int]
) -> list[str]:
    out: list[str] = []
    top = max((link.channels for link in view.links), default=1)
    # The culprit's links last, so they are drawn over the others.
    ordered = sorted(view.links, key=lambda link: _touches(link, view, culprits))
    for link in ordered:
        if view.aggregated:
            if link.src == link.dst or link.src not in lay.host_pos or link.dst not in lay.host_pos:
                continue
            (x1, y1), (x2, y2) = lay.host_centre(link.src), lay.host_centre(link.dst)
            bend = 18.0
        else:
            src, dst = int(link.src), int(link.dst)
            if src not in lay.rank_pos or dst not in lay.rank_pos:
                continue
            (x1, y1), (x2, y2) = lay.rank_centre(src), lay.rank_centre(dst)
            bend = 16.0 if ranks[src].host == ranks[dst].host else 24.0
        thickness = 1 + 3 * link.channels / top
        dash = ' stroke-dasharray="6 3" class="anomalous"' if link.anomalous else ""
        title = f"{link.src} -> {link.dst}: {link.detail}, {link.channels} channels"
        colour, opacity = _colour(link.transport), "0.7"
        if _touches(link, view, culprits):
            # Outlined in the culprit's colour, its transport colour still inside.
            out.append(
                f'<path d="{_curve(x1, y1, x2, y2, bend)}" fill="none" stroke="{CULPRIT}" '
                f'stroke-width="{thickness + 4:.1f}" class="culprit-link"/>'
            )
            title = f"the culprit's link: {title}"
            opacity = "1"
        if link.anomalous:
            colour = ANOMALY
        out.append(
            f'<path d="{_curve(x1, y1, x2, y2, bend)}" fill="none" '
            f'stroke="{colour}" stroke-width="{thickness:.1f}" '
            f'stroke-opacity="{opacity}"{dash}><title>{escape(title)}</title></path>'
        )
    return out


def render_topology_svg(
    view: TopologyView, culprits: frozenset[int] = frozenset(), *, part_of: int | None = None
) -> str:
    """Render ``view`` as a standalone SVG document fragment (``<svg>...</svg>``).

    Args:
        view: The communicator to draw.
        culprits: Its ranks (communicator ranks) that the verdict blames: their GPU, host box
            and links are drawn in the culprit's colour.
        part_of: When ``view`` holds only some hosts of the communicator, how many it has.
    """
    lay = _Layout(view)
    hosts_word = "host" if len(view.hosts) == 1 else "hosts"
    heading = (
        f"comm {view.id}: {view.nranks if view.nranks is not None else len(view.ranks)} ranks "
        f"on {len(view.hosts)} {hosts_word}"
        + (f", {view.channels} channels" if view.channels else "")
        + (" (links aggregated per host)" if view.aggregated else "")
    )
    if part_of is not None:
        heading = (
            f"comm {view.id}: the culprit's host and the hosts its links join "
            f"({len(view.hosts)} of {part_of})"
        )
    lay.width = max(lay.width, 2 * PAD + 7 * len(heading))
    out: list[str] = []
    out.append(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="topology" role="img" '
        f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" width="{lay.width:.0f}" '
        f'height="{lay.height:.0f}" font-family="sans-serif" font-size="11" fill="#1b1f24">'
    )
    # A light card in either colour scheme: the drawing's dark text stays readable.
    out.append(f'<rect width="{lay.width:.0f}" height="{lay.height:.0f}" fill="#ffffff"/>')
    out.append(f"<title>{escape(heading)}</title>")
    out.append(f'<text x="{PAD}" y="20" font-size="13" font-weight="bold">{escape(heading)}</text>')
    used = sorted({link.transport for link in view.links}, key=list(COLOURS).index)
    x = PAD
    for family in used:
        out.append(
            f'<line x1="{x}" y1="38" x2="{x + 22}" y2="38" stroke="{_colour(family)}" '
            f'stroke-width="3"/><text x="{x + 26}" y="42">{escape(family)}</text>'
        )
        x += 40 + 7 * len(family)
    if culprits & set(lay.rank_pos):
        out.append(
            f'<rect x="{x}" y="31" width="14" height="14" fill="#ffeb3b" stroke="{CULPRIT}" '
            f'stroke-width="2.5"/><text x="{x + 20}" y="42">culprit</text>'
        )
        x += 80
    if any(h.anomalous for h in view.hosts):
        out.append(
            f'<rect x="{x}" y="31" width="14" height="14" fill="none" stroke="{ANOMALY}" '
            f'stroke-width="2.5"/><text x="{x + 20}" y="42">anomaly</text>'
        )
    ranks = {r.rank: r for r in view.ranks}
    # Boxes first, then links, then GPUs on top, so every GPU and its number stay readable.
    for host in view.hosts:
        out.extend(_host_box(host, lay, culprits))
    out.extend(_link_paths(view, lay, ranks, culprits))
    for host in view.hosts:
        out.extend(_gpu_cells(host, lay, ranks, culprits))
    out.append("</svg>")
    return "\n".join(out)
