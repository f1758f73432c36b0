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
        yield self.finding(
            severity="error",
            title=f"the watchdog heartbeat monitor fired on rank(s) {', '.join(map(str, ranks)) or '?'}",
            detail="The ProcessGroupNCCL watchdog thread stopped heartbeating: it is blocked itself, "
            "typically in a CUDA call on a wedged GPU or inside an NCCL abort.",
            events=events,
            ranks=ranks,
            confidence=0.6,
            next_steps=(
                "Check nvidia-smi and dmesg | grep -i xid on the hosts of those ranks.",
                "Take native stacks (py-spy dump --native --pid PID) to see where the watchdog thread waits.",
            ),
        )
