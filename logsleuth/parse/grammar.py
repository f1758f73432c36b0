"""Load the Lark grammars of ``grammars/`` once per process, and read their terminals.

Every parser of :mod:`logsleuth.parse` is built here: one cached :class:`~lark.Lark` per
(grammar, start symbols, algorithm, lexer, transformer class). The shortcuts around a
parser (pre-filters, fast paths, regexes that find where a line begins) take their
regexes from the grammar's own terminals with :func:`terminal_regex`, so that the
language is written down once, in the grammar.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

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
    """
    return Lark(
        read_grammar(name),
        parser=parser,
        lexer=lexer,
        start=list(start) if isinstance(start, tuple) else start,
        transformer=transformer() if transformer is not None else None,
    )


@cache
def terminal_regex(grammar: Lark, name: str) -> re.Pattern[str]:
    """Return terminal ``name`` of ``grammar`` as a compiled regex (flags included).

    The pattern is the one the lexer matches, a terminal defined from other terminals
    included; it is not anchored, so it can be searched for as well as matched.
    """
    return re.compile(grammar.get_terminal(name).pattern.to_regexp())
