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
