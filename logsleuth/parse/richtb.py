"""Read rich's boxed tracebacks as the Python tracebacks they show.

``rich.traceback`` (installed by Typer applications, and by training scripts that call
``rich.traceback.install()``) draws a traceback in a box::

    ╭───────────── Traceback (most recent call last) ─────────────╮
    │ /workspace/train.py:88 in <module>                           │
    │                                                              │
    │   87 │   dm = TokenDataModule(cfg)                           │
    │ ❱ 88 │   trainer.fit(model, dm)                              │
    ╰──────────────────────────────────────────────────────────────╯
    OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.

Each box line is given to the readers as the line CPython would have printed in its place:
the head, ``  File "PATH", line N, in FUNC`` for a frame, an indented source line for the
rest of the box. The exception line under the box is CPython's already.
"""

from __future__ import annotations

import re

BOX_FIRST = frozenset("\u256d\u2502\u2570")
"""What a line of the box begins with: its top corner, its side, its bottom corner."""
_HEAD = re.compile(r"\u256d\u2500+ Traceback \(most recent call last\) \u2500+\u256e\s*$")
_FRAME = re.compile(
    r"\u2502 (?P<path>[^\s\u2502][^\u2502]*?):(?P<line>\d+) in (?P<func>[^\s\u2502]*)\s*\u2502\s*$"
)
_BOTTOM = re.compile(r"\u2570\u2500+\u256f\s*$")


class RichTraceback:
    """Rewrites the lines of rich's traceback boxes, one input's lines in order."""

    def __init__(self) -> None:
        self.inside = False
        self._pending: tuple[str, str] | None = None
        """A frame whose function name rich pushed onto the next box line: (path, line)."""

    def rewrite(self, text: str) -> str:
        """Return what CPython would have printed for ``text``; other lines as they are."""
        if not self.inside:
            if _HEAD.match(text):
                self.inside = True
                return "Traceback (most recent call last):"
            return text
        if _BOTTOM.match(text):
            self.inside = False
            return "    " + text.strip()
        if not text.startswith("\u2502"):
            self.inside = False
            return text
        inner = text.strip("\u2502 \t")
        pending, self._pending = self._pending, None
        if pending is not None and inner.isidentifier():
            return f'  File "{pending[0]}", line {pending[1]}, in {inner}'
        frame = _FRAME.match(text)
        if pending is not None and frame is None:
            return f'  File "{pending[0]}", line {pending[1]}, in ?'
        if frame is not None:
            if not frame.group("func"):
                # A long path pushes the function name onto the next box line: the frame
                # is read there, once its name is known.
                self._pending = (frame.group("path"), frame.group("line"))
                return "    " + inner
            return f'  File "{frame.group("path")}", line {frame.group("line")}, in {frame.group("func")}'
        return "    " + inner
