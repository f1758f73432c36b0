"""What analysis concludes: findings, the verdict, and the views the reports show."""

from __future__ import annotations

from dataclasses import dataclass, field

from logsleuth.model.p2p import P2PView
from logsleuth.model.ranks import format_ranks
from logsleuth.model.topology import TopologyView
from logsleuth.model.waitfor import WaitFor

SEVERITIES = ("info", "warning", "error", "critical")
"""Finding severities, least severe first."""

KINDS = (
    "healthy",
    "inconclusive",
    "missing-collective",
    "collective-mismatch",
    "collective-timeout",
    "init-stall",
    "bootstrap-failure",
    "network-error",
    "transport-degraded",
    "transport-mismatch",
    "config-mismatch",
    "duplicate-gpu",
    "cuda-error",
    "resource-exhausted",
    "process-died",
    "watchdog-stuck",
    "non-collective-stall",
    "concurrent-use",
)
"""The stable finding vocabulary of CONTRACT section 3."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """A quoted input line: where it is and what it says."""

    source: str
    line: int
    text: str
    context: tuple[tuple[int, str], ...] = ()
    """(line, text) of the lines around it that logsleuth kept, in line order, itself excluded.

    Only lines that became events are kept, so a gap in the line numbers is a line that was
    blank, unrecognized or (for long runs of collectives) skipped by the parser.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One conclusion of one rule."""

    code: str
    name: str
    kind: str
    severity: str
    title: str
    detail: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()
    communicator: str | None = None
    confidence: float = 0.5
    evidence: tuple[Evidence, ...] = ()
    next_steps: tuple[str, ...] = ()
    evidence_total: int = 0
    """How many lines supported the finding before the list was cut to the strongest few."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The primary finding, restated for the first line of every report."""

    kind: str
    summary: str
    culprit_ranks: tuple[int, ...] = ()
    culprit_hosts: tuple[str, ...] = ()
    culprit_pids: tuple[int, ...] = ()
    confidence: float = 0.0
    code: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankView:
    """What is known about one process (a rank when known, else a host:pid stream)."""

    rank: int | None
    host: str | None
    pid: int | None
    devices: tuple[int, ...] = ()
    bus_ids: tuple[str, ...] = ()
    nccl_version: str | None = None
    sources: tuple[str, ...] = ()
    last_collective: str | None = None
    """``AllReduce #0x28d on comm 0x..`` for the last COLL line, when logged."""
    state: str | None = None
    """Where the stacks say the process is (``all_reduce``, ``data loading``, ...)."""
    first_error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommunicatorView:
    """One NCCL communicator (or torch process group) and how far each rank got."""

    id: str
    nranks: int | None
    ranks_seen: str
    init_complete: str
    init_missing: str = ""
    hosts: tuple[str, ...] = ()
    aborted: str = ""
    last_op_counts: tuple[tuple[str, int, str], ...] = ()
    """(rank range, last logged opCount, collective) groups, most advanced first."""
    channels: int | None = None
    transports: tuple[tuple[str, int], ...] = ()
    """(transport, number of connection lines) across the communicator."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StackClass:
    """Ranks (or processes) whose main-thread stacks are the same."""

    ranks: str
    count: int
    frames: tuple[str, ...]
    """Innermost first, as ``func (file:line)``."""
    category: str
    """``collective``, ``init``, ``data-loading``, ``compute``, ``lock``, ``io``, ``sleep``, ``unknown``."""
    call_site: str | None = None
    """The first user frame outside libraries (``train_step (train.py:15)``)."""
    collective: str | None = None
    pids: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    libraries: tuple[str | None, ...] = ()
    """The library each frame runs in (``torch``, ``stdlib``, ``native``), None for user code;
    in the order of :attr:`frames` (empty when not known)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StackTreeNode:
    """One frame of the merged call tree of many processes (a STAT prefix tree).

    The root is synthetic (``frame == ""``); its children are the outermost frames. Every
    node knows which processes pass through it: ``ranks`` for those whose rank is known,
    ``pids`` for the others. Children are ordered largest first, then by frame.
    """

    frame: str
    """``func (file:line)`` as the first process through this node printed it."""
    count: int
    ranks: tuple[int, ...] = ()
    pids: tuple[int, ...] = ()
    children: tuple[StackTreeNode, ...] = ()
    library: str | None = None
    """The library the frame runs in (``torch``, ``stdlib``, ``native``); None for user code."""
    category: str | None = None
    """Where a stack class ends at this node: its category (``collective``, ``data-loading``)."""
    collective: str | None = None
    call_site: str | None = None
    suspect: str | None = None
    """``non-collective`` or ``other-collective`` when the class ending here is an outlier."""

    def members(self) -> str:
        """Return who passes through this node, as STAT labels an edge: ``0-3,5``, ``pid 7``."""
        parts: list[str] = []
        if self.ranks:
            parts.append(format_ranks(self.ranks))
        if self.pids:
            parts.append("pid " + ",".join(str(p) for p in self.pids))
        unnamed = self.count - len(self.ranks) - len(self.pids)
        if unnamed > 0:
            parts.append(f"{unnamed} unnamed")
        return "; ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSuspect:
    """A stack class that differs from what most processes are doing.

    ``kind`` is ``"non-collective"`` (most processes wait in a collective, these are
    elsewhere: the usual straggler) or ``"other-collective"`` (these wait in a different
    collective than the majority: a desync, often a symptom of the straggler).
    """

    stack_class: StackClass
    kind: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """The job as a whole."""

    world_size: int | None = None
    hosts: tuple[str, ...] = ()
    nccl_versions: tuple[tuple[str, tuple[int, ...], tuple[str, ...]], ...] = ()
    """(version, ranks, hosts) per NCCL version seen."""
    torch_version: str | None = None
    launcher: str | None = None
    time_range: tuple[str, str] | None = None
    host_aliases: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(host as the report names it, the other names the evidence gives the same machine): a
    docker compose service, a pod of ``kubectl logs --prefix``, a Ray worker's address, read
    as one host with NCCL's hostname on the same lines."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressGroup:
    """Members of a communicator that stopped at the same collective."""

    ranks: str
    count: int
    op_count: int | None
    """The last opCount they logged; None for members that logged no collective at all."""
    collective: str = ""
    behind: int | None = None
    """Collectives behind the most advanced member; None when nothing was logged."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommProgress:
    """Where each member of one communicator stopped, most advanced group first."""

    id: str
    nranks: int | None
    members: int
    groups: tuple[ProgressGroup, ...]
    laggards: str = ""
    """Ranks behind the most advanced group or without any collective, as a range."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstError:
    """The first error of some processes, grouped when the message is the same but for numbers."""

    kind: str
    """``NCCL WARN``, ``NCCL error``, ``watchdog timeout``, ``watchdog``, ``gloo``,
    ``traceback``, ``process failed``."""
    message: str
    ranks: str
    processes: int
    hosts: tuple[str, ...] = ()
    time: str | None = None
    """When the earliest of them was logged (``HH:MM:SS.mmm``, with the date when known)."""
    last_time: str | None = None
    evidence: Evidence | None = None
    """The earliest line of the group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigValue:
    """One value of a configuration key and the processes that had it."""

    value: str
    ranks: str
    processes: int
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigEntry:
    """A configuration key (version, driver, plugin, ``NCCL_*`` variable) across processes."""

    key: str
    values: tuple[ConfigValue, ...]
    """Most common value first."""
    unset: str = ""
    """Ranks that logged NCCL lines but no value for the key."""
    differs: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class InputView:
    """The accounting of one input, as CONTRACT section 3 ``inputs[]`` shows it."""

    source: str
    kind: str
    lines: int
    recognized: int
    unrecognized: int
    blank: int
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """Everything a report shows, deterministic for the same inputs."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    job: JobView
    communicators: tuple[CommunicatorView, ...]
    stack_classes: tuple[StackClass, ...]
    ranks: tuple[RankView, ...]
    inputs: tuple[InputView, ...]
    gaps: tuple[str, ...] = field(default=())
    """Data gaps in plain words: missing ranks, truncated files, unreadable inputs."""
    version: str = "0.1.0"
    topology: tuple[TopologyView, ...] = ()
    """The rebuilt topology of each communicator that logged its init (rings, transports)."""
    progress: tuple[CommProgress, ...] = ()
    """Per communicator, where each member stopped; communicators with laggards first."""
    timeline: tuple[FirstError, ...] = ()
    """First errors across processes, earliest first."""
    config: tuple[ConfigEntry, ...] = ()
    """Configuration seen across processes; keys whose value differs first."""
    waitfor: WaitFor | None = None
    """Who waits for whom and where the waiting ends; None when no process waits."""
    p2p: P2PView | None = None
    """Point-to-point sends and receives at the frontier; None when no source shows one."""
    stack_tree: StackTreeNode | None = None
    """The STAT prefix tree of :attr:`stack_classes`, outermost frame first; None without stacks."""
    stack_suspects: tuple[StackSuspect, ...] = ()
    """Stack classes that differ from what most processes do (majority is healthy)."""
