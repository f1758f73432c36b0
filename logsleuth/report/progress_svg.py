"""Draw where each member of a communicator stopped as a grid of ranks, laggards in colour.

One cell per rank, rank 0 at the top left, row by row; a run of neighbouring ranks in the
same state is one rectangle, so a 4,096-rank job with one laggard is a few dozen elements.
Like the topology drawing it uses presentation attributes only, so the page's CSP holds.
"""

from __future__ import annotations

from html import escape

from logsleuth.model.diagnosis import CommProgress, ProgressGroup
from logsleuth.model.ranks import parse_ranks

FILLS = {"ahead": "#2e7d32", "behind": "#c62828", "silent": "#9e9e9e"}
"""Cell colour per state: at the most advanced collective, behind it, no collective logged."""
LABEL_W = 44
LEGEND_W = 300
TOP = 22


def _state(group: ProgressGroup) -> str:
    if group.behind is None:
        return "silent"
    return "ahead" if group.behind == 0 else "behind"


def _group_title(group: ProgressGroup) -> str:
    if group.op_count is None:
        return f"ranks {group.ranks}: no collective logged"
    where = f"{group.collective} #{group.op_count} ({group.op_count:#x})"
    lag = f", {group.behind} behind" if group.behind else ""
    return f"ranks {group.ranks}: last logged {where}{lag}"


def _ranked(progress: CommProgress) -> dict[int, int]:
    """Map each rank to the index of its group; members without a rank are not drawn."""
    out: dict[int, int] = {}
    for i, group in enumerate(progress.groups):
        text = ",".join(p for p in group.ranks.split(",") if p.strip()[:1].isdigit())
        try:
            ranks = parse_ranks(text)
        except ValueError:
            continue
        for rank in ranks:
            out[rank] = i
    return out


def render_progress_svg(progress: CommProgress) -> str:
    """Render the rank grid of ``progress``; an empty string when no member has a rank."""
    cells = _ranked(progress)
    if not cells:
        return ""
    size = max(progress.nranks or 0, max(cells) + 1)
    cols = 64 if size > 256 else 32 if size > 32 else max(size, 8)
    cell = 10 if size > 256 else 16
    rows = (size + cols - 1) // cols
    # The legend needs room even when a small communicator's grid is narrow.
    width = max(LABEL_W + cols * cell + 8, LEGEND_W)
    height = TOP + rows * cell + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="progress-grid" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="10">',
        f"<title>{escape(f'comm {progress.id}: where each rank stopped')}</title>",
    ]
    x = LABEL_W
    for state, label in (("ahead", "most advanced"), ("behind", "behind"), ("silent", "no COLL")):
        out.append(
            f'<rect x="{x}" y="4" width="10" height="10" fill="{FILLS[state]}"/>'
            f'<text x="{x + 14}" y="13" fill="currentColor">{label}</text>'
        )
        x += 24 + 6 * len(label)
    for row in range(rows):
        y = TOP + row * cell
        out.append(
            f'<text x="{LABEL_W - 4}" y="{y + cell - 2}" text-anchor="end" '
            f'fill="currentColor">{row * cols}</text>'
        )
        col = 0
        while col < cols:
            rank = row * cols + col
            if rank >= size:
                break
            group = cells.get(rank)
            end = col + 1
            while end < cols and row * cols + end < size and cells.get(row * cols + end) == group:
                end += 1
            if group is not None:
                g = progress.groups[group]
                out.append(
                    f'<rect x="{LABEL_W + col * cell}" y="{y}" width="{(end - col) * cell - 1}" '
                    f'height="{cell - 1}" fill="{FILLS[_state(g)]}">'
                    f"<title>{escape(_group_title(g))}</title></rect>"
                )
            col = end
    out.append("</svg>")
    return "\n".join(out)
