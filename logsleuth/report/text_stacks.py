"""The merged stack tree (STAT prefix tree) for the terminal, from ``Diagnosis.stack_tree``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.console import RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from logsleuth.model.diagnosis import Diagnosis, StackTreeNode


def _heading(title: str) -> Text:
    return Text(title.upper(), style="bold")


def _indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def _more(shown: int, total: int, what: str) -> Text | None:
    if total <= shown:
        return None
    return Text(f"... {total - shown} more {what} in the HTML and JSON reports", style="dim")


TREE_LINE_LIMIT = 60
"""Lines of the merged stack tree the terminal shows before pointing at the other reports."""
MEMBERS_WIDTH = 24
"""Widest rank set the tree prints whole."""


def stack_tree(d: Diagnosis) -> Iterator[RenderableType]:
    """Print the STAT prefix tree: outermost frame first, each line with the ranks through it.

    Frames that every process of a branch shares stay on the branch's indent; a new indent
    starts where ranks go different ways. Runs of three or more library frames (torch, the
    standard library, native code) are folded to their first and last frame; the HTML and
    JSON reports keep every frame of every class.
    """
    root = d.stack_tree
    if len(d.stack_classes) < 2 or root is None:
        return  # one class: the table above already says everything
    rows: list[tuple[str, Text]] = []
    _tree_rows(root.children, "", rows)
    yield Text()
    yield _heading("Stack tree (outermost frame first)")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for members, line in rows[:TREE_LINE_LIMIT]:
        grid.add_row(members, line)
    yield _indent(grid)
    more = _more(TREE_LINE_LIMIT, len(rows), "tree lines")
    if more is not None:
        yield _indent(more)


def _tree_rows(nodes: Sequence[StackTreeNode], indent: str, rows: list[tuple[str, Text]]) -> None:
    """Append the rows of ``nodes`` (siblings, largest first) and their subtrees to ``rows``."""
    branching = len(nodes) > 1
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        glyph = ("└─ " if last else "├─ ") if branching else ""
        below = indent + (("   " if last else "│  ") if branching else "")
        chain = [node]
        while len(chain[-1].children) == 1 and chain[-1].category is None:
            chain.append(chain[-1].children[0])
        members = node.members()
        if len(members) > MEMBERS_WIDTH:
            # Scattered rank sets print long; the classes table and the JSON have them whole.
            members = f"{members[: MEMBERS_WIDTH - 8]}... ({node.count})"
        for j, label in enumerate(_folded(chain)):
            line = Text(indent + glyph if j == 0 else below)
            line.append(label)
            rows.append((members if j == 0 else "", line))
        leaf = chain[-1]
        if leaf.category is not None:
            note = leaf.collective or leaf.category
            tag = f"  <- {note}" + (" (outlier)" if leaf.suspect else "")
            rows[-1][1].append(tag, style="bold red" if leaf.suspect else "dim")
        _tree_rows(leaf.children, below, rows)


def _folded(chain: Sequence[StackTreeNode]) -> list[str]:
    """Return the labels of ``chain`` with inner runs of 3+ library frames folded."""
    labels: list[str] = []
    i = 0
    while i < len(chain):
        j = i
        while j < len(chain) and chain[j].library is not None:
            j += 1
        run = j - i
        if run >= 3:
            libraries = sorted({n.library for n in chain[i:j] if n.library})
            labels.append(chain[i].frame)
            labels.append(f"... {run - 2} {', '.join(libraries)} frames ...")
            labels.append(chain[j - 1].frame)
            i = j
        else:
            labels.append(chain[i].frame)
            i += 1
    return labels
