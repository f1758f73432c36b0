"""Clean physical lines and strip the prefixes launchers and collectors put in front of them.

Implements section 4.2 and 4.6 of the NCCL log spec: CR, NUL and ANSI escapes go;
``[rank3]:`` / ``[default3]:`` (torchrun), ``[1,3]<stdout>:`` (Open MPI), ``3: `` (srun
``--label``), ``(RayWorkerWrapper pid=1019) `` (Ray), ``(worker1, rank=1, pid=2311) ``
(SkyPilot), ISO ``...Z `` (docker/kubectl) and
``[YYYY-MM-DD HH:MM:SS] `` (CI, NCCL 2.26+), ``aws logs tail`` stream names after the ISO
time (CloudWatch), Loki's ``{pod="x"} `` labels after it, ``[pod/<pod>/<container>] `` (``kubectl logs --prefix``) and issue-paste
artefacts (``> `` quote markers, markdown fences) are stripped and what they say is kept as
an :class:`~logsleuth.model.base.Origin` hint. Line-number prefixes from log viewers
(``451 ``, ``[80746] ``), srun labels and pdsh host labels (``gpu-a01: ``) are ambiguous on
a single line, so they are only stripped when most of a file carries them
(:mod:`logsleuth.parse.numbering`). A file's constant indent or tag (:func:`detect_indent`,
:func:`detect_lead`) and a terminal's wrap (:func:`detect_wrap`) are read from a sample too.
"""

from __future__ import annotations

import calendar
import html
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from logsleuth.model.base import NO_ORIGIN, Origin
from logsleuth.parse.numbering import (
    LOGGER_LEVEL,
    LOKI_LABELS,
    MONTHS,
    NCCL_WRITER,
    NUMBERING_SCHEMES,
    SYSLOG_LINE,
    epoch_seconds,
    label_fields,
    syslog_seconds,
)

_ANSI = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]"
    # Control strings: OSC (a terminal hyperlink, a title), APC (Buildkite's ``_bk;t=`` time
    # stamp), DCS, PM, SOS, ended by BEL or ST (or cut off by the line's end).
    r"|\x1b[\]_P^X][^\x07\x1b]*(?:\x07|\x1b\\|$)"
)

_ORPHAN_SGR = re.compile(r"\[[0-9]{1,3}(?:;[0-9]{1,3})*m")
"""An SGR colour code left without its ESC (a terminal's colours copied from a rendered page):
``[36m``, ``[1;31m``, ``[0m``; looked for on lines that also hold a reset (``[0m``,
``[39m``), as coloured output does. (``[m``, the short reset, is left: ``[master-0]:29500``.)"""

# torch's excepthook writes "[rankN]: " (one space); torchrun --tee writes "[defaultN]:" (none).
_TORCHRUN = re.compile(r"\[(?:(rank)(\d+)\]: ?|([A-Za-z_]+?)(\d+)\]:)")
RANK_TAG = re.compile(r"\[rank(?::? |=)(\d+)\] ")
"""A rank tag in front of a message: Lightning's ``[rank: 3] Seed set to 42``, and the
``[rank 3] `` that training scripts put in their own log format."""
WRITER_RANK = re.compile(
    r"\[(?i:rank)[:= ]?\s?(\d{1,6})(?:/\d+)?\]"
    r"|\((?i:rank)[:= ]?\s?(\d{1,6})(?:/\d+)?\)"
    r"|(?<![\w.-])(?:(?i:global|world)_)?(?i:rank)(?:=|: ?)(\d{1,6})(?![\w.])"
    r"|(?:^|\|)\s*(?i:rank) (\d{1,6})\s*\|"
)
"""A writer's rank as a log format writes it into its prefix: ``[RANK 2]``, ``(rank 2)``,
``rank=2``, ``global_rank: 2``, ``| rank 2 |`` (``rank 2 |`` where the columns before it
were taken off as a logger's prefix; a tag, not the word rank in prose; not a local rank)."""
MPI_TAG = re.compile(r"\[\d+,(?:mpirank:)?(\d+)(?:,([\w.\-]+))?\]<(?:stdout|stderr|stddiag)>:\s?")
"""Open MPI's ``--tag-output`` (``[1,3]<stdout>:``), and SageMaker's form of it that names
the host too (``[1,mpirank:3,algo-2]<stderr>:``)."""
_RAY = re.compile(
    r"\((?:(?P<name>[\w.]+)(?: rank=(?P<rank>\d+)| (?P<tag>TP\w*))? )?pid=(?P<pid>\d+)"
    r"(?:, ip=(?P<ip>[\d.]+))?\)\s"
    r"|\((?P<daemon>raylet|gcs_server|autoscaler|monitor|dashboard_agent), ip=(?P<at>[\d.]+)\)\s"
)
"""A worker process's tag: Ray's ``(RayWorkerWrapper pid=1019, ip=...)``, vLLM's
``(VllmWorker rank=1 pid=2302)``, ``(VllmWorker TP1 pid=..)``, ``(Worker_TP1 pid=..)``; or a
Ray daemon's lines forwarded to the driver (``(raylet, ip=10.0.1.7)``). The address is the
node's."""
_TP_NAME = re.compile(r"^(?!.*(?:^|_)(?:PP|DP)\d)\w*?(?:^|_)TP(\d+)(?:_EP\d+)?$")
"""A process named for its tensor-parallel rank alone (``Worker_TP1``, ``TP1``, sglang's
``TP5 EP5``): that is its rank (not with pipeline stages or data-parallel replicas,
``Worker_PP1_TP2``, ``PP1 TP5``, where TP ranks repeat)."""


def _tp_rank(label: str) -> int | None:
    """The rank a tensor-parallel label names (see ``_TP_NAME``); blanks separate like ``_``."""
    found = _TP_NAME.search(label.strip().replace(" ", "_"))
    return int(found.group(1)) if found else None


_VLLM = re.compile(
    r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"(?:\[?[\w.\-]+\.py:\d+\] )?"
)
"""vLLM's logger: ``ERROR 11-24 02:11:09 [core.py:396] `` (``llm_engine.py:161] `` before
0.8); its time has no year."""
_LEVEL_WORDS = ("INFO ", "WARNING ", "ERROR ", "DEBUG ", "CRITICAL ")
_DATETIME = r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[.,](\d+))?"
"""A logger's date and time, and its fraction of a second."""
_STAMP = r"\[" + _DATETIME
_PARALLEL = r"(?: (?:TP|DP|PP|EP)\d+)"
"""sglang's parallel ranks after its time (`` TP5``, `` DP1 TP3``)."""
FRAMEWORK_PREFIX = re.compile(f"{_VLLM.pattern}|{_STAMP}{_PARALLEL}+\\]\\s")
"""A serving framework's logger prefix (vLLM's, sglang's with its ranks): a line behind one
is that framework's output even when its message is not one the catalogs know."""
_SKYPILOT = re.compile(r"\(([\w.\-]+), rank=\d+, pid=\d+(?:, ip=([\d.]+))?\)\s")
"""SkyPilot's ``(worker1, rank=1, pid=2311, ip=10.0.0.5) ``: the node's rank and the pid of
its task's shell, not of the process that wrote the line (which are not kept), and the
node's address (kept as its host; the node's SkyPilot name where the address is missing)."""
_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(?:Z|[+-]\d\d:?\d\d)\s")
# A time of day alone: Jenkins' timestamper (``10:00:01  ``), ``ts '%H:%M:%S'``, an elapsed
# time (``00:00:01.234 ``).
_CLOCK = re.compile(r"(\d{1,2}):(\d\d):(\d\d)(?:[.,]\d+)?(?: [AP]M)?\s+(?=\S)")
_AIRFLOW = re.compile(
    r"\[(\d{4}-\d\d-\d\d)(?:, |[ T])(\d\d:\d\d:\d\d)(?:[.,](\d+))?(?: [A-Z]{2,5}| ?[+-]\d\d:?\d\d)?\] "
    r"\{[\w.\-]+:\d+\} [A-Z]+ - "
)
"""Airflow's task log (``[2024-05-14, 03:12:40 UTC] {subprocess.py:93} INFO - ``; before 2.6
``[2023-01-05T10:44:37.355+0000]``): a job launched from a DAG has each line behind it."""
_LOGGER_HEAD = re.compile(_DATETIME + " " + LOGGER_LEVEL)
"""A Python logger's time and level: loguru's default format (``2024-06-11 09:12:44.902 |
ERROR    | pkg.mod:func:240 - ``), logging's ``%(asctime)s %(levelname)s %(message)s`` and
``%(asctime)s - %(name)s - %(levelname)s - %(message)s``."""
_BRACKET_TIME = re.compile(f"{_STAMP}(?:Z|[+-]\\d\\d:?\\d\\d)?({_PARALLEL}*)\\]\\s")
"""``[2024-05-01 12:00:00] `` (CI, NCCL 2.26+; ``Z`` or an offset may follow the time), or
sglang's ``[2025-02-24 14:09:34 TP5] `` with the process's parallel ranks."""
_DETERMINED = re.compile(r"[0-9a-f]{8} (?:\[rank=(\d+)\] )?\|\| ")
"""Determined AI's task log after its time (``[2023-09-14T10:12:13.57Z] 6ad8a0d6 [rank=3] ||
``): the container's id, and the rank of the worker that wrote the line."""
_DEEPSPEED_HEAD = re.compile(
    r"\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] \[[\w.\-]+\.py:\d+:[\w<>.]+\] "
)
"""The level and code location DeepSpeed's logger puts after its time (``[2024-05-02
10:27:10,778] [ERROR] [launch.py:321:sigkill_handler] ``); the time is read as a stamp."""
# "aws logs tail" writes "<ISO time> <log stream> <message>"; stream names hold a '/'.
_CLOUDWATCH_STREAM = re.compile(r"[\w.\-]+(?:/[\w.\-\[\]$]+)+\s")
# Kubernetes CRI log files: "<ISO time> stdout|stderr F|P <message>".
_CRI_STREAM = re.compile(r"(?:stdout|stderr) [FP] ")
# Grafana/Loki's "Download logs": "<ISO time> {container="x", pod="y"} <message>".
_LOKI_LABELS = re.compile(LOKI_LABELS)
_STREAM_TAG = re.compile(r"\[(?i:stdout|stderr)\] ?")
"""The stream a collector read a line from (Azure ML's ``[stderr] ``, CI runners')."""
_KUBECTL = re.compile(r"\[pod/([^\s/\]]+)/[^\s\]]+\]\s")
# docker compose's "<container>  | " (v2 ``trainer-1``, ``proj-trainer-1``; v1 ``trainer_1``):
# the container's name ends in its replica number, and stands for the host.
_COMPOSE = re.compile(r"([A-Za-z0-9][\w.-]*?[-_]\d+) +\|(?: |$)")
_QUOTE = re.compile(r"(?:> ?)+")
_UCX = re.compile(r"(?:\[\d+\.\d+\] )?\[([A-Za-z][\w.\-]*):(\d+):\d+(?::\d+)?\]\s+")
"""UCX's writer tag (``[node-4:54321:0:54321] Caught signal 11 ...`` from its error handler;
``[1700000000.123456] [node-4:54321:0] ucp_worker.c:123 UCX ERROR ...`` from its logger):
the host and the pid of the process of Open MPI, Horovod or UCC that wrote the line."""
# A pasted markdown fence: the whole line (```text) is an artefact, a glued one (```host:..) not.
_FENCE_LINE = re.compile(r"\s*(?:```|~~~)[\w+.-]*\s*$")
_FENCE = re.compile(r"```|~~~")
PREFIX_FIRST = frozenset("[(>0123456789`~ ")
"""First characters of every prefix that needs no numbering scheme."""
_HEX_FIRST = frozenset("0123456789abcdef")
"""First characters of a container id (Determined's, after its time)."""
_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")


_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|apos|nbsp|#\d{1,6}|#x[0-9a-fA-F]{1,6});")


TYPOGRAPHY = {
    0x00A0: " ",  # no-break space (a web page's runs of blanks)
    0x2007: " ",  # figure space
    0x2009: " ",  # thin space
    0x202F: " ",  # narrow no-break space
    0x200B: "",  # zero-width space
    0xFEFF: "",  # byte-order mark, zero-width no-break space
    0x201C: '"',
    0x201D: '"',
    0x2018: "'",
    0x2019: "'",
    0x2013: "-",  # en dash: " - Init COMPLETE" after a word processor
    0x2212: "-",  # minus sign
}
"""What a web page, a chat or a word processor puts for a log's blanks, quotes and dashes."""
_BR_END = re.compile(r"[ \t]*<br[ \t]*/?>[ \t]*$", re.IGNORECASE)
"""An HTML line break at the end of a line copied from a page's source or a rich editor."""
_TAB_FRAME = re.compile(r"\t+\S.* \(.+:\d+\)$")
"""A py-spy frame line (``func (file.py:12)``) indented by tabs."""


def clean(raw: str) -> str:
    """Remove CR, NUL, other C0 controls and ANSI escapes from one decoded line.

    The leading tabs of a py-spy frame line become 4 blanks each; no-break and other
    typographic blanks, curly quotes and dashes become what the program wrote. HTML
    entities of a page copied as source (``&lt;``, ``&quot;``, ``&#39;``) are undone, and
    the page's line break (``<br>``) ending a line is taken off.
    """
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    elif "[0m" in raw or "[39m" in raw:
        # Colour codes whose ESC a web page dropped (``[36m(RayTrainWorker pid=..)[0m``).
        raw = _ORPHAN_SGR.sub("", raw)
    raw = raw.rstrip("\r\n")
    if "\r" in raw:
        # A carriage return inside a line is a terminal overwrite: the last segment is what showed.
        raw = raw.rsplit("\r", 1)[-1] if raw.rsplit("\r", 1)[-1].strip() else raw.replace("\r", "")
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    if "<" in raw and (end := _BR_END.search(raw)) is not None:
        # A line break of an HTML page (``<br>``) left at the end of a pasted line.
        raw = raw[: end.start()]
    if "&" in raw and _ENTITY.search(raw):
        raw = html.unescape(raw).replace("\xa0", " ")
    if not raw.isascii():
        raw = raw.translate(TYPOGRAPHY)
    if raw[:1] == "\t" and _TAB_FRAME.match(raw):
        # An editor or a paste turned the 4-blank indentation of a py-spy frame into a tab.
        body = raw.lstrip("\t")
        raw = "    " * (len(raw) - len(body)) + body
    return raw


_WRAP_MIN, _WRAP_MAX = 60, 512
_FRAME_CHARS = "|\u2502\u2503\u2551\u256e\u256f\u2510\u2518+*#"


def _widest(sample: Sequence[str]) -> tuple[list[int], int] | None:
    """The lengths of ``sample``'s lines and the longest, when that may be a wrap width."""
    lengths = [len(line) for line in sample]
    width = max(lengths, default=0)
    return (lengths, width) if _WRAP_MIN <= width <= _WRAP_MAX else None


def detect_wrap(sample: Sequence[str]) -> int | None:
    """Return the width a terminal hard-wrapped ``sample`` (cleaned lines) at, or None."""
    return detect_hard_wrap(sample)[0]


def detect_hard_wrap(sample: Sequence[str], *, lone_cut: bool = True) -> tuple[int | None, str]:
    """Return the width a terminal hard-wrapped ``sample`` (cleaned lines) at, or None, and
    the hanging indent of its continuation pieces (:func:`detect_hang`; "" without one).

    A terminal (or a ticket's fixed-width box) cuts a long line into pieces of exactly its
    width, and the piece after a cut starts anywhere in a sentence. So: several lines of
    exactly the longest length, and the lines after them do not begin like them (the
    longest lines of a normal log, COLL lines of one shape, are followed by more of the same).
    ``lone_cut=False``: one cut is not enough (the lines were a list's items, each its own).
    """
    widest = _widest(sample)
    if widest is None:
        return None, ""
    lengths, width = widest
    cut = [i for i, n in enumerate(lengths) if n == width and i + 1 < len(sample)]
    # One line said twice with something else after each (an error, then the traceback that
    # ends in it) is no width; a long line logged again, cut again, continues alike.
    if len({sample[i] for i in cut}) < 2 and len({sample[i + 1] for i in cut}) > 1:
        return None, ""
    # A box (a rich traceback, a table) has lines of one width too, but they end in its frame.
    if sum(1 for i in cut if sample[i][-1:] in _FRAME_CHARS) * 2 > len(cut):
        return None, ""
    # Word wrap (``fold -s``, a ticket's box) breaks after a blank, so every piece ends in
    # one and the next begins with a word, shorter pieces as well as the longest (which, for
    # similar messages, share a length): that is no cut at a fixed width.
    if all(_soft_break(sample, i) for i in cut) and any(
        _soft_break(sample, i) and not begins_line(sample[i + 1])
        for i, n in enumerate(lengths[:-1])
        if n < width
    ):
        return None, ""
    near = sum(1 for n in lengths if width - 10 <= n <= width)
    if len(cut) * 10 < near * 3:
        return None, ""
    # Under a wrapping handler's hanging indent, the pieces after the first share it: a
    # piece followed by another is a cut like the first, though both begin alike.
    hang = detect_hang(sample, width)
    fresh = sum(
        1
        for i in cut
        if sample[i + 1].strip()
        and (
            _start_shape(sample[i + 1]) != _start_shape(sample[i])
            or (hang != "" and sample[i + 1].startswith(hang))
        )
        and not begins_line(sample[i + 1])
        and not _FRAME_ONLY.match(sample[i + 1])  # a stack's next frame, from another file
        and not _same_columns(sample[i], sample[i + 1])  # the next row of a table (sacct)
    )
    # A line of exactly twice the width ends in a full piece too, before a line of its own:
    # half the cuts continuing is enough.
    if fresh >= 2 and fresh * 2 >= len(cut):
        return width, hang
    # A short excerpt cut once, at a terminal's usual width, in the middle of a word
    # (``...ProcessGroupNCCL.c`` then ``pp:272, unhandled system error``).
    if lone_cut and fresh == len(cut) == 1 and width in _TERMINAL_WIDTHS:
        before, after = sample[cut[0]], sample[cut[0] + 1]
        from logsleuth.parse.catalog import whole_message  # the catalog reads through clean

        # One line that happens to be as long as a terminal is wide, and is a whole known
        # line (a traceback's frame ending in its function's name), was not cut there.
        if whole_message(before):
            return None, ""
        if before[-1:].isalnum() and after[:1].isalnum():
            return width, hang
        # Under a wrapping handler's hanging indent (``    tem error``, ``    .17.127.143``)
        # the indent says the piece continues: a cut in any word or number is one. A line
        # indented as deep is the next of an indented block (a report's, a table's).
        hang = after[: len(after) - len(after.lstrip(" "))]
        if (
            len(hang) >= 2
            and not _indented_by(before, hang)
            and not _FRAME_ONLY.match(after)
            and before[-1:].strip()
            and after.lstrip(" ")[:1] not in ("", "#")
        ):
            return width, hang
    return None, ""


def detect_hang(sample: Sequence[str], width: int) -> str:
    """Return the blanks a hard wrap at ``width`` put before each continuation piece, or "".

    A logging handler that wraps to the terminal (rich's, a console viewer's) indents the
    pieces after the first to its message column: the lines after the cut pieces then share
    a run of blanks no line of their own begins with (a stack frame keeps its indentation).
    """
    cuts = [i for i, line in enumerate(sample[:-1]) if len(line) == width]
    after = [sample[i + 1] for i in cuts if sample[i + 1].strip()]
    leads = [
        line[: len(line) - len(line.lstrip(" "))]
        for line in after
        if line[:2] == "  " and not _FRAME_ONLY.match(line)
    ]
    # The longest run nearly every piece begins with: a piece whose text began with a blank
    # (the cut fell before one) has one more.
    for hang in sorted(set(leads), key=len, reverse=True):
        if sum(1 for lead in leads if lead.startswith(hang)) * 5 >= len(after) * 4:
            # Some cut piece must be a first one, not indented just so: in an indented block
            # (a report) every long line is, and the next is its sibling.
            return hang if any(not _indented_by(sample[i], hang) for i in cuts) else ""
    return ""


def _indented_by(line: str, blanks: str) -> bool:
    """Say whether ``line`` begins with exactly ``blanks`` and then text."""
    return line.startswith(blanks) and line[len(blanks) : len(blanks) + 1] not in (" ", "")


def unhung(piece: str, hang: str) -> str:
    """Return a wrapped line's continuation ``piece`` without the ``hang`` a wrapping handler
    put before it (:func:`detect_hang`); a stack frame keeps its own indentation."""
    if hang and piece.startswith(hang) and not _FRAME_ONLY.match(piece):
        return piece[len(hang) :]
    return piece


_TERMINAL_WIDTHS = frozenset({80, 100, 120, 132, 160, 200})
"""Widths terminals and ticket boxes wrap at: one cut at one of them can be told from a line
that happens to be that long only by the word it splits."""


_RULE_CHARS = "-=+|~_ "
"""What a table's rule line is made of."""
_COLUMN = re.compile(r"(?<=\S)  +(?=\S)")
"""The gap before a column of a fixed-width table (two blanks or more)."""


def _same_columns(line: str, after: str) -> bool:
    """Say whether two lines are rows of one fixed-width table: their columns begin at the
    same offsets (two or more of them), which a piece cut at a width does not do."""
    starts = {m.end() for m in _COLUMN.finditer(line)}
    return len(starts) >= 2 and len(starts & {m.end() for m in _COLUMN.finditer(after)}) >= 2


def _soft_break(sample: Sequence[str], i: int) -> bool:
    """Say whether line ``i`` ends after a blank and the next begins with a word."""
    return sample[i][-1:] == " " and bool(sample[i + 1][:1].strip())


def detect_word_wrap(sample: Sequence[str]) -> int | None:
    """Return the width ``sample`` was word-wrapped at with the blanks dropped, or None.

    A reflowing editor, a mail client or ``textwrap`` breaks a long line at the last blank
    that fits the width and drops that blank: a piece ends where the next word would not
    have fitted, and the next piece starts mid-sentence. So: the pieces before a break are
    the longest lines, the first word of the next piece would have run past the width, and
    the next piece neither begins a line of its own nor looks like the line before it
    (a log of similar lines of one length is no wrap).
    """
    lengths = [len(line) for line in sample]
    for width in _word_wrap_widths(lengths):
        long = [
            i for i, n in enumerate(lengths) if width - 20 <= n <= width and i + 1 < len(sample)
        ]
        breaks = [i for i in long if word_wrapped(sample[i], sample[i + 1], width)]
        # A hard wrap breaks only pieces of the full width; a word wrap breaks shorter ones.
        shorter = any(lengths[i] < width for i in breaks)
        if shorter and len(breaks) >= 2 and len(breaks) * 2 >= len(long):
            return width
    return None


_UNWRAPPED_SHARE = 20
"""At most one line in this many may be longer than a word wrap's width: text the paster
typed around what the wrap cut (a ticket's prose above the wrapped log)."""


def _word_wrap_widths(lengths: Sequence[int]) -> list[int]:
    """The widths a word wrap may have had: the longest line's, then, while few lines are
    longer, each shorter length (longest first, at most three tries)."""
    allowed = max(1, sum(1 for n in lengths if n) // _UNWRAPPED_SHARE)
    widths: list[int] = []
    for width in sorted(set(lengths), reverse=True):
        if len(widths) == 3 or sum(1 for n in lengths if n > width) > allowed:
            break
        if _WRAP_MIN <= width <= _WRAP_MAX:
            widths.append(width)
    return widths


QUOTE_MARKS = re.compile(r"(?:> ?)+")
"""Quote markers at a line's start (``> ``, ``> > ``, ``>>``): a reply's, added after a wrap."""


def word_wrapped(line: str, after: str, width: int) -> bool:
    """Say whether ``after`` continues ``line``, broken at a blank by a wrap at ``width``.

    Quote markers both lines carry came after the wrap (a mail client's reply): the text
    behind them was wrapped, to the width less theirs.
    """
    quoted = QUOTE_MARKS.match(line)
    if quoted is not None and after.startswith(quoted.group()):
        cut = quoted.end()
        line, after, width = line[cut:], after[cut:], width - cut
    word = after.split(" ", 1)[0]
    return (
        bool(word)
        and len(line) <= width
        and line[-1:] not in _FRAME_CHARS  # a box's line ends in its frame
        and not line[-1:].isspace()
        and len(line) + 1 + len(word) > width
        and not begins_line(after)
        and _start_shape(after) != _start_shape(line)
        and not _FRAME_ONLY.match(after)
        and bool(after.strip(_RULE_CHARS))  # a table's rule under its header
        and not _same_columns(line, after)
    )


def _start_shape(line: str) -> str:
    """The first characters of a line with digits folded (line numbers and times differ)."""
    return re.sub(r"\d+", "0", line[:16])


BARE_COLL = r"(?:[A-Z][A-Za-z]{2,20}: )?opCount [0-9a-fA-F]+ sendbuff "
"""An NCCL COLL message without its ``host:pid:tid [dev] NCCL INFO`` prefix."""

# Where a known line begins behind an unknown prefix (a foreign timestamp, a progress bar
# glued before it, a viewer's columns): the shapes family readers start with.
_LINE_START = re.compile(
    r"(?<![\w.\-])[^\s:\[\]]+:\d+:\d+ (?:\[-?\d+\] |NCCL )"  # NCCL host:pid:tid
    r"|\[(?:rank|default)\d+\]:|\[rank: \d+\] "  # torchrun / torch excepthook, Lightning
    r"|\[\d+,\d+\]<std(?:out|err|diag)>:"  # Open MPI
    r"|\[[EWIFC]\d{3,4} \d\d:\d\d:\d\d|\[[EWIF] [\w.]+:\d+\] "  # c10 logging
    r"|(?<![\w.])[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+ "  # glog
    r"|Traceback \(most recent call last\)"
    r"|\[Rank \d+\] (?=Watchdog|Exception|Process group|Heartbeat|Timeout|Received)"  # c10 message tag
    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d"
    r"|(?<!\d)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"
    r"|\bThread (?:0x[0-9a-fA-F]+|\d+) \([\w+ ]*\)|\bCurrent thread 0x[0-9a-fA-F]+ "
    r"|\bProcess \d+: |\bPython v\d+\.\d+\.\d+\S* \("  # py-spy, faulthandler
    r"|#\d+ +0x[0-9a-fA-F]+ in |Thread \d+ \(Thread 0x[0-9a-fA-F]+ \(LWP \d+\)"  # gdb
    r"|(?<![\w.:])"
    + BARE_COLL  # an NCCL COLL line whose prefix was cut
    + r"|(?<= \| )(?=\S)"  # after a column separator of some collector's table
)


def begins_line(text: str) -> bool:
    """Return True when ``text`` begins like a line of its own (a known prefix or start)."""
    stripped, _ = strip_prefixes(text)
    # Quote markers and backticks are pasting artefacts, not a writer's prefix.
    prefix = text[: len(text) - len(stripped)] if text.endswith(stripped) else text
    if prefix.strip(" >`~"):
        return True
    return next(line_starts(" " + text), -1) == 1


def line_starts(text: str) -> Iterator[int]:
    """Yield the offsets after 0 in ``text`` where a known line shape begins."""
    for found in _LINE_START.finditer(text, 1):
        yield found.start()


_FRAME_ONLY = re.compile(
    r"[ \t]+(?:File \"|\S+ \([^()\s]*:\d+\)$|(?:0x[0-9a-fA-F]+|\S+) \([^()\s]*\.so\b[^()\s]*\)$"
    r"|0x[0-9a-fA-F]+ \([^()]*\)$)"
)
"""A py-spy frame (``    func (file.py:12)``, native ``    0x7f.. (libc.so.6)``) or a
faulthandler frame (``  File "x.py", line 3``): the indentation belongs to the format."""


def detect_indent(sample: Sequence[str]) -> str:
    """Return the blanks every non-blank line of ``sample`` (cleaned lines) begins with, or "".

    A paste indented as a markdown code block (or a quoted e-mail) moves every line right;
    no log format indents all of its lines, except a stack dump cut down to its frames,
    whose indentation is its own: a sample with a frame line among its least indented
    lines keeps it (an indented dump's least indented lines are its headers).
    """
    lines = [line for line in sample if line.strip()]
    if len(lines) < 2 or not all(line[0] in " \t" for line in lines):
        return ""
    indents = [line[: len(line) - len(line.lstrip(" \t"))] for line in lines]
    common = min(indents, key=len)
    while common and not all(indent.startswith(common) for indent in indents):
        common = common[:-1]
    least = [line for line, indent in zip(lines, indents, strict=True) if indent == common]
    # A code block moves lines by two blanks or more, or a tab; the first line of an excerpt
    # cut in its middle may begin with the blank of the cut, which says nothing.
    if (len(common) < 2 and common != "\t") or any(_FRAME_ONLY.match(line) for line in least):
        return ""
    return common


_MIN_LEAD_LINES = 3
_FRAMED = re.compile(r"\| .*\||\|\s*\|")
"""A line between a left and a right pipe (``| text |``), trailing blanks taken off."""


def detect_frame(sample: Sequence[str]) -> bool:
    """Say whether every non-blank line of ``sample`` (cleaned lines) stands in a frame of
    ASCII pipes (``| text |``), as a paste boxed by a tool or put in a table's cells is.

    Tables whose lines are framed but that also have rules (nvidia-smi's ``+----+``, a
    markdown table's ``|---|``) are no frame: their lines are rows, not pasted lines.
    """
    lines = [line.rstrip() for line in sample if line.strip()]
    return len(lines) >= _MIN_LEAD_LINES and all(_FRAMED.fullmatch(line) for line in lines)


def unframe(line: str) -> str:
    """Take a line out of its frame (``| text |`` -> ``text``); other lines as they are."""
    end = line.rstrip()
    if not (end.startswith("|") and end.endswith("|") and len(end) > 1):
        return line
    return end[2:-1].rstrip() if end.startswith("| ") else end[1:-1].strip()


_DEVICE_ONLY = re.compile(r"\[-?\d+\]\s")


def detect_lead(sample: Sequence[str]) -> str:
    """Return text every non-blank line of ``sample`` (cleaned lines) begins with, that no
    known prefix explains and after which lines begin as lines of their own, or "".

    A job's own tag on every line (``[job-7f3a][trainer] ``) hides the starts of the
    block formats behind it (a stack dump's headers, torchrun's failure summary); messages
    are found anywhere in a line, but those blocks are read from their lines' starts. The
    tag must end in a blank, must not be a prefix :func:`strip_prefixes` knows (it keeps
    what those say) or the start of a message (a file of one message logged again and again
    shares its words), and taking it off must let more lines begin like lines.
    """
    lines = [line for line in sample if line.strip()]
    if len(lines) < _MIN_LEAD_LINES or lines[0][:1] in " \t":
        return ""
    common = lines[0]
    for line in lines[1:]:
        while not line.startswith(common):
            common = common[: len(common) - 1]
        if not common:
            return ""
    if (bullet := _BULLET.match(common)) is not None and len(set(lines)) > 1:
        # A list's marker on every line (a chat's or a ticket's bullets); one line said
        # again and again may begin with its own dash (NCCL RAS's ``- Snapshot ...``).
        return bullet.group()
    cut = max(common.rfind(" "), common.rfind("\t"))
    lead = common[: cut + 1] if cut > 0 else ""
    # NCCL's device field alone (``[3] NCCL INFO ...``, its writer cut off) is no tag.
    if len(lead.strip()) < 2 or NCCL_WRITER.search(lead) or _DEVICE_ONLY.match(lead):
        return ""
    if begins_line(lead):
        return ""
    if strip_prefixes(lead + "x")[0] == "x":
        return ""  # a known prefix: stripped line by line, with what it says
    gained = sum(1 for line in lines if begins_line(line[len(lead) :]))
    before = sum(1 for line in lines if begins_line(line))
    # Behind a tag that is only brackets or a pipe (``[job-7f3a][trainer] ``, ``job-7 | ``)
    # may stand a block no line of which begins like a log line (an ``ncclras`` status).
    return lead if gained > before or (gained == before and _TAG.fullmatch(lead)) else ""


_BULLET = re.compile(r"[-*+\u2022] +")
"""A markdown or chat list marker: ``- ``, ``* ``, ``+ ``, ``\u2022 ``."""


def is_bullet(lead: str) -> bool:
    """Say whether ``lead`` (what :func:`detect_lead` found) is a list's marker."""
    return _BULLET.fullmatch(lead) is not None


_TAG = re.compile(
    r"(?:\[[^\]]*\]|\([^)]*\)|\{[^}]*\}|<[^>]*>|[\w.\-@/]+ *\|)(?:[ \t]*(?:\[[^\]]*\]|\([^)]*\)|\{[^}]*\}|<[^>]*>|[\w.\-@/]+ *\||\|))*[ \t]+"
)
"""A tag of brackets or a name and a pipe, as jobs and collectors put before each line."""


def _with(hint: Origin, **changes: Any) -> Origin:
    """``replace(hint, **changes)``; the usual first prefix of a line builds one directly."""
    return Origin(**changes) if hint is NO_ORIGIN else replace(hint, **changes)


def strip_prefixes(line: str, numbering: str | None = None) -> tuple[str, Origin]:
    """Strip every launcher/collector prefix at the start of ``line``.

    Returns the remaining text and an Origin hint with what the prefixes said. Prefixes
    nest in any order (``[80746] [rank0]:[E321 ...`` or ``[1,3]<stdout>:[2024-..] host:..``).
    """
    if (
        numbering is None
        and line[:1] not in PREFIX_FIRST
        and line[:3] not in MONTHS
        and "[repeated" not in line
        and not line.startswith(_LEVEL_WORDS)
        and " |" not in line[:80]
    ):
        return line, NO_ORIGIN  # the common case: nothing to strip
    hint = NO_ORIGIN
    text = line
    if " |" in text[:80] and (m := _COMPOSE.match(text)):
        hint = Origin(host=m.group(1))
        text = text[m.end() :]
    scheme = NUMBERING_SCHEMES.get(numbering) if numbering else None
    for _ in range(6):
        before = text
        if scheme is not None and (m := scheme.match(text)):
            hint = _with(hint, **label_fields(numbering, m))
            text = text[m.end() :]
            scheme = None  # a file is numbered once
        if text.startswith("["):
            if m := MPI_TAG.match(text):
                hint = _with(hint, rank=int(m.group(1)))
                if m.group(2):
                    hint = _with(hint, host=m.group(2))
                text = text[m.end() :]
            elif m := _TORCHRUN.match(text):
                if m.group(1):
                    hint = _with(hint, rank=int(m.group(2)))
                else:
                    hint = _with(hint, local_rank=int(m.group(4)))
                text = text[m.end() :]
            elif m := RANK_TAG.match(text):
                hint = _with(hint, rank=int(m.group(1)))
                text = text[m.end() :]
            elif m := _AIRFLOW.match(text):
                hint = _with(hint, time=epoch_seconds(m.group(1) + " " + m.group(2), m.group(3)))
                text = text[m.end() :]
            elif m := _BRACKET_TIME.match(text):
                hint = _with(hint, time=epoch_seconds(m.group(1), m.group(2)))
                if m.group(3) and (tp := _tp_rank(m.group(3))) is not None:
                    hint = _with(hint, rank=tp)
                text = text[m.end() :]
            elif m := _STREAM_TAG.match(text):
                text = text[m.end() :]  # a collector's stream tag says nothing of the writer
            elif m := _KUBECTL.match(text):
                # A pod is one network identity: its name stands for the host.
                hint = _with(hint, host=m.group(1))
                text = text[m.end() :]
            elif m := _DEEPSPEED_HEAD.match(text):
                text = text[m.end() :]
            elif m := _UCX.match(text):
                hint = _with(hint, host=m.group(1), pid=int(m.group(2)))
                text = text[m.end() :]
        elif text.startswith("("):
            if (m := _RAY.match(text)) and m.group("daemon"):
                hint = _with(hint, host=m.group("at"))
                text = text[m.end() :]
            elif m:
                hint = _with(hint, pid=int(m.group("pid")))
                if m.group("ip"):
                    hint = _with(hint, host=m.group("ip"))
                rank = m.group("rank")
                tp = _tp_rank(m.group("tag") or m.group("name") or "")
                if rank is not None or tp is not None:
                    hint = _with(hint, rank=int(rank) if rank is not None else tp)
                text = text[m.end() :]
            elif m := _SKYPILOT.match(text):
                hint = _with(hint, host=m.group(2) or m.group(1))
                text = text[m.end() :]
        elif text[:1] in _HEX_FIRST and (m := _DETERMINED.match(text)):
            if m.group(1):
                hint = _with(hint, rank=int(m.group(1)))
            text = text[m.end() :]
        elif text[:1].isdigit():
            if m := _LOGGER_HEAD.match(text):
                hint = _with(hint, time=epoch_seconds(m.group(1), m.group(2)))
                text = text[m.end() :]
            elif m := _ISO.match(text):
                hint = _with(hint, time=epoch_seconds(m.group(1)))
                text = text[m.end() :]
                if m := (
                    _CLOUDWATCH_STREAM.match(text)
                    or _CRI_STREAM.match(text)
                    or _LOKI_LABELS.match(text)
                ):
                    text = text[m.end() :]
            elif m := _CLOCK.match(text):
                # No date: seconds into 1970's first day, as other year-less times are read.
                hours, minutes, seconds = (int(part) for part in m.groups())
                hint = _with(hint, time=float(hours * 3600 + minutes * 60 + seconds))
                text = text[m.end() :]
        elif text.startswith(_LEVEL_WORDS) and (m := _VLLM.match(text)):
            month, day, clock = m.groups()
            name = calendar.month_abbr[int(month)] if 1 <= int(month) <= 12 else ""
            hint = _with(hint, time=syslog_seconds(name, day, clock))
            text = text[m.end() :]
        elif text[:3] in MONTHS and (m := SYSLOG_LINE.match(text)):
            hint = _with(hint, **label_fields("syslog", m))
            text = text[m.end() :]
        elif text.startswith(">") and (m := _QUOTE.match(text)):
            text = text[m.end() :]
        elif text[:1] in "`~ ":
            if _FENCE_LINE.match(text):
                return "", hint
            if m := _FENCE.match(text):
                text = text[m.end() :]
            elif text.startswith("`"):
                # An inline-code span around a pasted line: drop both backticks.
                text = text[1:]
                if text.rstrip().endswith("`"):
                    text = text.rstrip()[:-1]
        if text == before:
            break
    if "[repeated" in text:
        text = _RAY_REPEAT.sub("", text)
    return text, hint
