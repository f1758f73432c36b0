"""Rules that read NCCL's RAS reports (``ncclras``, NCCL 2.24.3+; spec 2.13)."""

from __future__ import annotations

from collections.abc import Iterable

from logsleuth.analysis.correlate import address_hosts
from logsleuth.analysis.index import EvidenceIndex, Stream
from logsleuth.analysis.rules.base import Rule, culprits
from logsleuth.model.diagnosis import Finding
from logsleuth.model.nccl import NcclRasReport


def _hash(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


class RasMissingProcess(Rule):
    """NCCL's RAS network got no data from some job processes: they are dead or unreachable.

    Symptom:
        ``ncclras`` reports ``INCOMPLETE`` communicators with ``Missing communicator data
        from N job process(es)`` / ``Rank R -- GPU G managed by process P on node N`` or
        ``The missing ranks: ...``, or ``N job processes considered dead (unreachable via
        the RAS network)``. RAS threads run beside the training code, so a process that
        does not answer them is gone, frozen as a whole, or cut off from the network; the
        other ranks then wait for it in their next collective.

    Likely causes:
        A process killed by the OOM killer or a signal, a crash in native code, a node
        that rebooted or lost its network, a process stopped (SIGSTOP) or swapped out.

    What to check:
        On the named node: ``ps -p PID``, ``dmesg -T`` (OOM killer, GPU Xid errors),
        the rank's own log and launcher output; run ``ncclras`` again to see that the
        process stays missing (RAS declares a peer dead after 60 s without keep-alives).
    """

    code = "LS206"
    name = "ras.missing_process"
    kind = "process-died"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        reports = index.all_of(NcclRasReport)
        missing = [r for r in reports if r.processes or r.missing_ranks or _missing(r)]
        if not missing:
            return
        hosts_by_ip = address_hosts(index)
        streams: set[Stream] = set()
        ras_ranks: set[int] = set()
        errors: list[str] = []
        for report in missing:
            one_comm = len(report.records) <= 1 and self._world(index, report)
            for rank, _gpu, pid, node, what in report.ranks:
                if what != "missing":
                    errors.append(f"rank {rank} reported {what} (pid {pid} on {node})")
                    continue
                streams.add((hosts_by_ip.get(node, node), pid))
                if one_comm:
                    ras_ranks.add(rank)
            for pid, node, _gpu in report.processes:
                streams.add((hosts_by_ip.get(node, node), pid))
            if one_comm:
                ras_ranks.update(report.missing_ranks)
        ranks, hosts, pids = culprits(index, sorted(streams, key=str))
        ranks = sorted(set(ranks) | ras_ranks)
        who = ", ".join(f"pid {pid} on {host}" for host, pid in sorted(streams, key=str)[:4])
        if not who:
            who = f"rank(s) {', '.join(map(str, ranks))}" if ranks else "some processes"
        more = f" and {len(streams) - 4} more" if len(streams) > 4 else ""
        reported = (
            f" Ranks that answered reported errors too: {'; '.join(errors[:4])}." if errors else ""
        )
        yield self.finding(
            severity="critical",
            title=f"NCCL RAS has no data from {who}{more}: the process is dead or unreachable",
            detail=(
                f"ncclras could not collect communicator data from {who}{more}. RAS threads "
                "answer independently of the training code, so these processes are gone, "
                "frozen as a whole or cut off from the network, and their peers wait for them "
                "in the next collective." + reported
            ),
            events=missing,
            ranks=ranks,
            hosts=hosts,
            pids=pids,
            confidence=0.75,
            next_steps=(
                f"On {hosts[0] if hosts else 'the named node'}: ps -p "
                f"{pids[0] if pids else 'PID'}; dmesg -T | grep -iE 'oom|xid|killed' around "
                "the time the job stopped.",
                "Run ncclras again (ncclras -v) to confirm the process stays missing; read its "
                "rank's last log lines and the launcher's exit summary.",
            ),
        )

    @staticmethod
    def _world(index: EvidenceIndex, report: NcclRasReport) -> bool:
        """Say whether the report's communicator is the world one (its ranks are global)."""
        if not report.records:
            return index.world_size is None
        wanted = _hash(report.records[0][1])
        for key, state in index.comms.items():
            if wanted is not None and _hash(key.removeprefix("0x")) == wanted:
                return state.nranks is not None and state.nranks == index.world_size
        return not index.comms  # no NCCL logs: the report is all there is


def _missing(report: NcclRasReport) -> bool:
    return any(what == "missing" for *_, what in report.ranks)
