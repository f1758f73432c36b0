"""Load the Lark grammars of ``grammars/`` once per process, and read their terminals.

Every parser of :mod:`logsleuth.parse` is built here: one cached :class:`~lark.Lark` per
(grammar, start symbols, algorithm, lexer, transformer class). The shortcuts around a
parser (pre-filters, fast paths, regexes that find where a line begins) take their
regexes from the grammar's own terminals with :func:`terminal_regex`, so that the
language is written down once, in the grammar.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import lark
from lark import Lark, Transformer

from logsleuth.resources import read_grammar


@cache
def load_parser(
    name: str,
    *,
    start: str | tuple[str, ...] = "start",
    parser: str = "lalr",
    lexer: str = "contextual",
    transformer: type[Transformer[Any, Any]] | None = None,
) -> Lark:
    """Return the parser of ``grammars/<name>``, built on first use.

    ``transformer`` is a class: its instance is applied by the parser as it reduces (an
    LALR parser's tree is never built). Equal arguments give the same parser object.
    An LALR parser's tables are kept in Lark's cache (see :func:`_cache_file`): every
    later run, and every worker that starts afresh (a spawned process, a Dask worker),
    loads them in a tenth of the time.
    """
    cached = _cache_file(name, start, lexer) if parser == "lalr" else None
    return Lark(
        read_grammar(name),
        parser=parser,
        lexer=lexer,
        start=list(start) if isinstance(start, tuple) else start,
        transformer=transformer() if transformer is not None else None,
        cache=cached or False,
    )


def _cache_file(name: str, start: str | tuple[str, ...], lexer: str) -> str | None:
    """Where Lark keeps the tables of a parser: the user's own cache folder, never a shared
    temporary directory (the file is a pickle, loaded as code is). None: no cache.

    Lark checks the grammar's and the options' digest stored in the file before using it, so
    a file of an older grammar is rebuilt; the name tells parsers and versions apart.
    """
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(root):
        return None  # no home to keep it in
    folder = Path(root) / "logsleuth"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    key = hashlib.sha256(repr((name, start, lexer)).encode()).hexdigest()[:16]
    version = f"{lark.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    return str(folder / f"lark-{Path(name).stem}-{key}-{version}.pickle")


def terminal_pattern(grammar: Lark, name: str) -> str:
    """Return the regex source of terminal ``name`` of ``grammar``, to compose others from.

    It is the pattern the lexer matches (flags included, a literal escaped, a terminal
    defined from other terminals expanded); it is not anchored. Only the terminals the
    parser uses are there: a terminal used only inside others must also appear in a rule.
    """
    return str(grammar.get_terminal(name).pattern.to_regexp())


@cache
def terminal_regex(grammar: Lark, name: str) -> re.Pattern[str]:
    """Return terminal ``name`` of ``grammar`` compiled (see :func:`terminal_pattern`)."""
    return re.compile(terminal_pattern(grammar, name))
