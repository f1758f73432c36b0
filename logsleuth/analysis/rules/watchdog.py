"""Rules about the framework's own watchdog and heartbeat monitor."""

from __future__ import annotations

from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.diagnosis import Finding
from logsleuth.model.torch import HeartbeatMonitor


class WatchdogStuck(Rule):
    """The ProcessGroupNCCL watchdog itself stopped making progress.

    Symptom:
        ``Heartbeat monitor timed out! Process will be terminated after dumping debug
        info`` or ``the watchdog thread ... is stuck``: the watchdog did not heartbeat for
        ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` (default 8 minutes).

    Likely causes:
        A CUDA call that blocks the watchdog (``cudaEventQuery`` hung because the GPU or
        driver is wedged), a deadlock inside NCCL abort, a GIL-holding thread starving it.

    What to check:
        ``nvidia-smi`` responsiveness and ``dmesg`` Xid errors on the host; native stacks
        of the process (``py-spy dump --native`` or ``gdb -p PID -batch -ex 'thread apply
        all bt'``) to see where the watchdog thread is blocked.
    """

    code = "LS501"
    name = "watchdog.stuck"
    kind = "watchdog-stuck"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        events = index.all_of(HeartbeatMonitor)
        if not events:
            return
        ranks = sorted({e.rank for e in events if e.rank is not None})
        # The rank whose monitor fired is where the waiting shows, not where it starts: its
        # watchdog blocks on a collective or a GPU that waits for somebody else. It is named
        # in the title, not as the culprit.
        yield self.finding(
            severity="error",
            title=f"the watchdog heartbeat monitor fired on rank(s) {', '.join(map(str, ranks)) or '?'}",
            detail="The ProcessGroupNCCL watchdog thread stopped heartbeating: it is blocked itself, "
            "typically in a CUDA call on a wedged GPU, inside an NCCL abort, or behind a "
            "collective that a slow or stuck rank never joins. The ranks that reported it waited; "
            "the rank that held them up is the one to find.",
            events=events,
            confidence=0.6,
            next_steps=(
                "Find the rank that did not report: dump every rank's stacks (py-spy dump) and "
                "look for one outside communication (data loading, evaluation on rank 0, I/O).",
                "Check nvidia-smi and dmesg | grep -i xid on the hosts of those ranks.",
                "Take native stacks (py-spy dump --native --pid PID) to see where the watchdog thread waits.",
            ),
        )
