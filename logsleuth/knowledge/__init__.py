"""The knowledge base: what every known failure message of NCCL and the frameworks means.

Entries are data (``data/*.toml``), loaded once, validated, and matched against the message
text of events. Rules decide what a set of events across ranks means; the knowledge decides
what one message means. Depends only on :mod:`logsleuth.model` and the standard library.
"""

from __future__ import annotations

from logsleuth.knowledge.entry import ROLES, SIDES, Entry, KnowledgeError
from logsleuth.knowledge.matcher import Hit, entries, entry_by_id, lookup, match, search

__all__ = [
    "ROLES",
    "SIDES",
    "Entry",
    "Hit",
    "KnowledgeError",
    "entries",
    "entry_by_id",
    "lookup",
    "match",
    "search",
]
