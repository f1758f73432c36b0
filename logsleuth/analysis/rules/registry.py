"""Every rule, in code order; ``explain`` and the engine both read this list."""

from __future__ import annotations

from logsleuth.analysis.rules.anomalies import HostNameCollision, TopologyFileForced
from logsleuth.analysis.rules.base import Rule
from logsleuth.analysis.rules.collectives import (
    CollectiveMismatch,
    CollectiveTimeout,
    MissingCollective,
    TransportSizeCheck,
)
from logsleuth.analysis.rules.concurrency import ConcurrentCommUse, UnwaitedCollective
from logsleuth.analysis.rules.config import NcclEnvMismatch, NcclVersionMismatch
from logsleuth.analysis.rules.flight import FlightRecorderMismatch
from logsleuth.analysis.rules.gloo import GlooSizeSender
from logsleuth.analysis.rules.gpu import CudaError, DuplicateGpu, ShmExhausted
from logsleuth.analysis.rules.horovod import HorovodStall
from logsleuth.analysis.rules.inconclusive import Inconclusive, Unproven
from logsleuth.analysis.rules.init import (
    DuplicateRanks,
    InitNeverReached,
    RollCallIncomplete,
    StoreBarrierWaiting,
)
from logsleuth.analysis.rules.jax import JaxCoordination
from logsleuth.analysis.rules.job import JobExitStatus
from logsleuth.analysis.rules.knowledge import KNOWLEDGE_RULES
from logsleuth.analysis.rules.network import (
    BootstrapFailure,
    IbCompletionError,
    RemoteClosed,
    SharedBootstrapAddress,
)
from logsleuth.analysis.rules.ordering import CrossCommP2P, CrossCommunicatorOrder
from logsleuth.analysis.rules.p2p import P2PFrontier
from logsleuth.analysis.rules.process import LeftEarly, ProcessDied
from logsleuth.analysis.rules.ras import RasMissingProcess, RasOperationMismatch
from logsleuth.analysis.rules.setup import SetupBehind, SetupNeverFinished
from logsleuth.analysis.rules.stacks import CollectiveDivergence, InitStall, NonCollectiveStall
from logsleuth.analysis.rules.topology import TOPOLOGY_RULES
from logsleuth.analysis.rules.transport import IbExpectedSocketUsed
from logsleuth.analysis.rules.waitfor import WaitForSink
from logsleuth.analysis.rules.watchdog import WatchdogStuck

RULES: tuple[type[Rule], ...] = tuple(
    sorted(
        (
            Inconclusive,
            HorovodStall,
            JaxCoordination,
            Unproven,
            MissingCollective,
            CollectiveMismatch,
            CollectiveTimeout,
            CrossCommunicatorOrder,
            TransportSizeCheck,
            GlooSizeSender,
            FlightRecorderMismatch,
            NonCollectiveStall,
            CollectiveDivergence,
            InitStall,
            InitNeverReached,
            SetupNeverFinished,
            SetupBehind,
            DuplicateRanks,
            RollCallIncomplete,
            StoreBarrierWaiting,
            BootstrapFailure,
            SharedBootstrapAddress,
            IbCompletionError,
            RemoteClosed,
            ProcessDied,
            RasMissingProcess,
            RasOperationMismatch,
            LeftEarly,
            JobExitStatus,
            DuplicateGpu,
            ShmExhausted,
            CudaError,
            NcclVersionMismatch,
            NcclEnvMismatch,
            WatchdogStuck,
            UnwaitedCollective,
            ConcurrentCommUse,
            CrossCommP2P,
            WaitForSink,
            P2PFrontier,
            *TOPOLOGY_RULES,
            IbExpectedSocketUsed,
            *KNOWLEDGE_RULES,
            TopologyFileForced,
            HostNameCollision,
        ),
        key=lambda r: r.code,
    )
)


def rule_by_code(code: str) -> type[Rule] | None:
    """Return the rule with ``code`` (case-insensitive) or dotted ``name``, or None."""
    wanted = code.strip().upper()
    for rule in RULES:
        if rule.code == wanted or rule.name == code.strip().lower():
            return rule
    return None
