"""Section headers of a pasted excerpt: lines that say whose output the lines below are.

Tickets and shells group output per process or per host under a header and strip each
line's own prefix: ``Rank A:``, ``## rank 3``, ``=== worker 1 ===``; ``tail`` and ``head``
over several files (``==> logs/rank3.log <==``); pdsh's ``dshbak`` and ClusterShell's
``clush -b`` (a host list between two rules); ``pssh -i`` and Ansible's per-host headers;
``kubectl describe``'s object header (``Name:`` then ``Namespace:`` or ``Roles:``). The lines up to the next header are the process's or the host's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from logsleuth.model.base import NO_ORIGIN, Origin, host_in_file_name, rank_in_file_name
from logsleuth.parse.catalog import load_catalog

SECTION = re.compile(
    r"\s*(?:#{1,6}\s*|\*\*|__|(?P<rule>[=\-~]{2,})\s*)?"
    r"(?P<word>(?i:rank|worker|process))[ #]?(?P<id>[A-Za-z]|\d{1,6})"
    r"(?:\s*\((?:[^()]{0,60})\))?\s*(?:\*\*|__)?\s*(?P<colon>:)?\s*(?:\*\*|__)?\s*"
    r"(?(rule)[=\-~]{2,}\s*)"
)
"""A header line naming a process: ``Rank A:``, ``## rank 3``, ``**Worker 1 (node2):**``,
``=== rank 1 ===``, ``---- worker 3 ----``."""

_PROSE = re.compile(r"\b(?i:rank)[ #_]?(?P<rank>\d{1,6})\b")
"""A rank a sentence names (``and on rank 1:``, ``py-spy dump of rank 0 gives:``)."""
_RANK_TAG = re.compile(r"\[rank\d+\]:")
"""torchrun's tag of a rank's output (``[rank0]: ...``): a line with it was logged, not typed."""
_PROSE_PID = re.compile(r"--pid[ =](?P<pid>\d{1,9})\b")
"""The pid a ``py-spy dump --pid N`` command names."""
_PROSE_MAX = 160
"""A sentence that introduces the output below it is short."""
_MESSAGE_SPAN = 16
"""A catalog match this long inside a line is a message quoted there, not a few words."""

_FILE = re.compile(r"\s*==> (?P<path>\S.{0,500}?) <==\s*")
"""``tail``/``head`` over several files: ``==> logs/rank3.log <==``."""

_RULE = re.compile(r"\s*-{4,}\s*")
_HOSTS = re.compile(
    r"(?P<hosts>[A-Za-z][\w.\-]{0,62}(?:\[[\d,\-]{1,200}\][\w.\-]{0,62})*)(?: \(\d+\))?"
)
"""The host list of a ``dshbak``/``clush -b`` block: ``gpu03``, ``gpu[01-02,04]``,
``node[1-4] (4)`` (clush adds the count)."""


_SHELL_HOST = re.compile(
    r"(?:\[\d+\] \d\d:\d\d:\d\d )?\[(?:SUCCESS|FAILURE)\] (?P<pssh>[\w.\-]+?)(?::\d+)?(?: .*)?"
    r"|(?P<ansible>[\w.\-]+) \| (?:CHANGED|SUCCESS|FAILED!?|UNREACHABLE!?) (?:\| rc=-?\d+ >>|=> \{)\s*"
)
"""A parallel shell's header of one host's output: ``pssh -i``'s ``[2] 10:00:00 [SUCCESS]
node3`` (its count and time may be taken off as a line's prefixes), Ansible's ``node3 |
CHANGED | rc=0 >>``."""

_DESCRIBED = re.compile(r"Name:\s+(?P<name>[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)\s*")
_DESCRIBED_NEXT = re.compile(r"(?:Namespace|Roles):\s+\S.*|Roles:\s*")
"""``kubectl describe pod|node``: the object's ``Name:`` and, on the next line, its
``Namespace:`` (a pod) or ``Roles:`` (a node). The pod stands for the host, as it does
behind ``kubectl logs --prefix``; its events and container states follow."""


@dataclass(frozen=True, slots=True)
class Header:
    """A header found: what it says of the writer, its label and its lines."""

    origin: Origin
    label: str
    lines: tuple[int, ...]
    """The header's physical lines (a host block's list and closing rule)."""
    stands_in: bool = False
    """Its label stands in for the host (``Rank A``): it tells the section's processes apart,
    so it outranks the host a collector's prefix names on every line."""


class Sections:
    """Finds the headers of one input, line by line."""

    __slots__ = ("_before", "_last")

    def __init__(self) -> None:
        # The last two non-blank lines seen (number, text), for a host block's look-back.
        self._before = self._last = (0, "")

    def header(self, number: int, text: str, writer: Origin = NO_ORIGIN) -> Header | None:
        """The header that line ``number`` (prefixes stripped) is or completes, or None.

        A host block is known at its closing rule: rule, host list, rule on consecutive
        lines. ``writer`` is what the line's own prefixes said of it (a line a rank wrote is
        no sentence about another rank).
        """
        (opened, rule), (listed, hosts) = self._before, self._last
        self._before, self._last = self._last, (number, text)
        named = SECTION.fullmatch(text)
        if named is not None and (
            named.group("colon")
            or named.group("rule")
            or text.lstrip().startswith(("#", "**", "__"))
        ):
            label = f"{named.group('word')} {named.group('id')}"
            origin = _process(named)
            return Header(origin, label, (number,), stands_in=origin.rank is None)
        if (prose := _introduces(text, writer)) is not None:
            return Header(prose, text.strip(), (number,))
        if writer.rank is None and _introduces_others(text):
            return Header(NO_ORIGIN, text.strip(), (number,))
        if writer.rank is None and writer.host is None and (host := _introduces_host(text)):
            return Header(Origin(host=host), text.strip(), (number,))
        if (text[:1] == "[" or " | " in text) and (shell := _SHELL_HOST.fullmatch(text)):
            name = shell.group("pssh") or shell.group("ansible")
            return Header(Origin(host=name), name, (number,))
        if (found := _file_header(text)) is not None:
            path = found.group("path")
            rank, host = rank_in_file_name(path), host_in_file_name(path)
            origin = Origin(rank=rank, host=host) if (rank, host) != (None, None) else NO_ORIGIN
            return Header(origin, path, (number,))
        if (
            listed == number - 1
            and hosts.startswith("Name:")
            and _DESCRIBED_NEXT.fullmatch(text)
            and (described := _DESCRIBED.fullmatch(hosts))
        ):
            name = described.group("name")
            return Header(Origin(host=name), name, (listed, number))
        if opened and _RULE.fullmatch(text):
            found = _HOSTS.fullmatch(hosts)
            if (
                found is not None
                and opened == number - 2
                and listed == number - 1
                and _RULE.fullmatch(rule)
            ):
                name = found.group("hosts")
                # A list of several hosts (``gpu[01-02,04]``) says the output is theirs alike.
                origin = NO_ORIGIN if "[" in name else Origin(host=name)
                return Header(origin, name, (listed, number))
        return None


def _introduces(text: str, writer: Origin) -> Origin | None:
    """The process a ticket's sentence names before the output it introduces, or None.

    ``py-spy dump on rank 0 gives:``, ``and on rank 1:``: a short line that ends with a colon,
    names one rank, and is no message a catalog knows (``Rank 3 is running collective:`` is
    torch's, not the reader's). The py-spy command that printed the dump (``$ py-spy dump
    --pid 3313  # rank 1``) names its pid, and may name its rank.
    """
    stripped = text.strip()
    if len(stripped) > _PROSE_MAX or stripped[:1] in "[(<" or writer.rank is not None:
        return None
    # The command that printed the dump below (``$ py-spy dump --pid 3313``) names its pid.
    pid = _PROSE_PID.search(stripped) if "py-spy" in stripped else None
    if not stripped.endswith(":") and pid is None:
        return None
    ranks = {int(m.group("rank")) for m in _PROSE.finditer(stripped)}
    if len(ranks) > 1 or (not ranks and pid is None):
        return None
    if load_catalog().prefix_end(stripped) or _RANK_TAG.search(stripped):
        # A logger or torchrun wrote it (``I0510 ... logging.py:337] [rank0]: Last error:``,
        # a collector's columns before ``[rank0]: ...``): the message it holds, no sentence.
        return None
    known = load_catalog().match(stripped)
    if known is not None and (known.start == 0 or known.end - known.start >= _MESSAGE_SPAN):
        return None  # the line is or quotes a message (a few words typed as a fragment: not)
    return Origin(rank=ranks.pop() if ranks else None, pid=int(pid.group("pid")) if pid else None)


_OTHERS = re.compile(
    r"(?i)\b(?:others?|rest|remaining|all|every|each|everyone)\b[\w ,'-]{0,40}?"
    r"\b(?:ranks?|workers?|nodes?|hosts?|pods?|processes|process|gpus?|machines?|servers?)\b"
)
"""A ticket's words for the other processes of a job (``the other workers``, ``all ranks``)."""


def _introduces_others(text: str) -> bool:
    """Say whether a ticket's sentence introduces the output of other processes.

    ``and the other workers:``, ``Then all ranks:``: what follows is no longer the process
    the section before named (a described pod, ``Rank 3:``). A short line that ends with a
    colon, names no rank and is no message a catalog knows.
    """
    stripped = text.strip()
    if len(stripped) > _PROSE_MAX or not stripped.endswith(":") or stripped[:1] in "[(<":
        return False
    if _OTHERS.search(stripped) is None or _PROSE.search(stripped):
        return False
    if load_catalog().prefix_end(stripped) or _RANK_TAG.search(stripped):
        return False
    return load_catalog().match(stripped) is None


_HOST_WORD = re.compile(
    r"(?<![\w.:/=-])(?:(?P<cue>on|from|of|node|host|pod|server|machine)\s+)?"
    r"(?P<host>[A-Za-z][A-Za-z0-9_-]*\d[A-Za-z0-9_-]*|[A-Za-z][A-Za-z0-9_]*-[A-Za-z0-9_-]*\d[A-Za-z0-9_-]*)"
    r"(?![\w./=-]|:\S)",
    re.IGNORECASE,
)
"""A host name in a ticket's sentence: letters and digits, after a word that says so (``on
node01``) or with a hyphen (``master-0``, ``gpu-b07``)."""
_NOT_PROSE = (" | ", "<stdout>", "<stderr>", "Traceback (most recent call last)")
_RULED = re.compile(r"\s*[-=#*]{2,}\s*(?P<inner>\S.*?)\s*[-=#*]{2,}\s*")


def _introduces_host(text: str) -> str | None:
    """The host a ticket's sentence names before the output it introduces, or None.

    ``dmesg -T on gpu-b07:``, ``master-0 just shows the NCCL error afterwards:``, ``---- node
    trn-a100-02 console ----``: a short line that ends with a colon (or stands between
    rules), names exactly one host-like word and no rank, and is no message a catalog knows.
    """
    stripped = text.strip()
    if len(stripped) > _PROSE_MAX or stripped[:1] in "[(<":
        return None
    ruled = _RULED.fullmatch(stripped)
    if ruled is None and not stripped.endswith(":"):
        return None
    body = ruled.group("inner") if ruled else stripped
    if _PROSE.search(body) or _RANK_TAG.search(body) or load_catalog().prefix_end(stripped):
        return None
    if any(mark in body for mark in _NOT_PROSE):
        return None  # a collector's columns, an MPI tag, a traceback's head: a logged line
    words = [m for m in _HOST_WORD.finditer(body) if m.group("cue") or "-" in m.group("host")]
    if len(words) != 1 or len(_HOST_WORD.findall(body)) != 1:
        return None
    known = load_catalog().match(stripped)
    if known is not None and (known.start == 0 or known.end - known.start >= _MESSAGE_SPAN):
        return None
    return words[0].group("host")


def _file_header(text: str) -> re.Match[str] | None:
    if text.lstrip().startswith("==>"):
        return _FILE.fullmatch(text)
    if "==> " in text and text.rstrip().endswith("<=="):
        # Behind a prefix that cleaning leaves on (a glog line's, a collector's columns).
        return _FILE.fullmatch(text[text.index("==> ") :])
    return None


def begins_section(text: str) -> bool:
    """Say whether ``text`` has the shape of a header naming a process or a file (a file of
    dumps that begins with one is an excerpt, read line by line)."""
    return SECTION.fullmatch(text) is not None or _file_header(text) is not None


def _process(header: re.Match[str]) -> Origin:
    """The process a header names: a rank when numeric, otherwise the label itself (it
    stands in for the host so that ``Rank A`` and ``Rank B`` stay two processes)."""
    label = header.group("id")
    if label.isdigit():
        return Origin(rank=int(label))
    return Origin(host=f"{header.group('word')} {label}")
