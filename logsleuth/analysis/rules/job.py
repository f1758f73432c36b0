"""Rules on how a job that ``logsleuth live`` ran ended (the bundle manifest's ``exit``)."""

from __future__ import annotations

from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.diagnosis import Finding

_CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"})


class JobExitStatus(Rule):
    """The job ended by itself with a non-zero exit status or was killed by a signal.

    Symptom:
        The bundle manifest that ``logsleuth live`` wrote says the job's command exited on
        its own (logsleuth did not end it) with a status other than 0, or that a signal
        (SIGSEGV, SIGKILL, SIGABRT ...) ended it. A job like that did not run to a normal
        end, whatever its logs show.

    Likely causes:
        An exception on a rank (torchrun then exits 1), a crash in native code (SIGSEGV,
        SIGABRT), the OOM killer or an operator (SIGKILL), a launcher that gave up.

    What to check:
        The end of ``launcher.log`` (tracebacks, torchrun's failure summary), ``dmesg -T``
        for the OOM killer and segfaults, and core dumps of the rank that crashed.
    """

    code = "LS207"
    name = "job.exit_status"
    kind = "process-died"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        for manifest in index.manifests:
            if not manifest.failed_by_itself:
                continue
            signame = manifest.exit_signal
            how = (
                f"was killed by {signame}"
                if signame
                else f"exited with status {manifest.exit_status}"
            )
            crashed = signame in _CRASH_SIGNALS
            yield self.finding(
                severity="error",
                title=f"the job {how}",
                detail=(
                    f"The job's command ({' '.join(manifest.command[:6])}) {how} on its own; "
                    "logsleuth did not end it. "
                    + (
                        "A crash signal points at native code (an extension, CUDA, NCCL) in "
                        "the process that received it."
                        if crashed
                        else "The launcher log says which rank failed first and why."
                    )
                ),
                events=[manifest],
                confidence=0.6 if signame else 0.45,
                next_steps=(
                    "Read the end of launcher.log: the first traceback or torchrun's failure "
                    "summary names the rank that failed.",
                    "Check dmesg -T for the OOM killer and segfaults around the time the job "
                    "ended.",
                ),
            )
