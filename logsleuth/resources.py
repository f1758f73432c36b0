"""Find the grammars and templates in a checkout and in an installed wheel.

In a checkout (and an editable install) they live at the repository top level, beside
the package; the wheel carries them as ``logsleuth/_data/{grammars,templates}``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def _data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"logsleuth installation is missing its {name}/ directory")


def grammar_path(name: str) -> Path:
    """Return the path of ``grammars/<name>`` (e.g. ``"nccl.lark"``)."""
    return _data_dir("grammars") / name


def template_dir() -> Path:
    """Return the directory holding ``report.html.j2`` and its CSS/JS."""
    return _data_dir("templates")


@cache
def read_grammar(name: str) -> str:
    """Return the text of ``grammars/<name>``, read once per process."""
    return grammar_path(name).read_text(encoding="utf-8")
