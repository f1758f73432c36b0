"""Rules that read NCCL's RAS reports (``ncclras``, NCCL 2.24.3+; spec 2.13)."""

from __future__ import annotations

import re
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
        # In a MISMATCH block RAS lists the minority's ranks, which answered: LS208 reads it.
        reports = [r for r in index.all_of(NcclRasReport) if not _mismatch_only(r)]
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


def _mismatch_only(report: NcclRasReport) -> bool:
    return bool(report.records) and all(kinds == "MISMATCH" for *_, kinds in report.records)


_LAUNCHED = re.compile(r"(\d+) ranks? ha(?:ve|s) launched up to operation (\d+)")
_RANK_LAUNCHED = re.compile(r"has launched up to operation (\d+)")


class RasOperationMismatch(Rule):
    """NCCL RAS: the ranks of a communicator launched different numbers of operations.

    Symptom:
        ``ncclras`` reports a communicator ``MISMATCH``: ``Communicator ranks have different
        AllGather operation counts``, ``30 ranks have launched up to operation 640``, ``2 ranks
        have launched up to operation 641``, and lists the ranks of the smaller group.

    Likely causes:
        The ranks behind never launched the next collective: they are stuck elsewhere (data
        loading, compute, I/O) or took another code path. The ranks ahead launched it and wait
        for them. RAS lists the smaller group, which may be either side: the listed ranks are
        the culprits only when they are behind.

    What to check:
        Dump the stacks of the ranks behind (py-spy dump): they are not in the collective.
        The ranks ahead only wait.
    """

    code = "LS208"
    name = "ras.operation_mismatch"
    kind = "missing-collective"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        hosts_by_ip: dict[str, str] | None = None
        for report in index.all_of(NcclRasReport):
            if not _mismatch_only(report):
                continue
            groups = [
                (int(m.group(1)), int(m.group(2)))
                for note in report.notes
                if (m := _LAUNCHED.search(note))
            ]
            # A group small enough is listed rank by rank ("Rank 1 has launched up to
            # operation 5 -- GPU ..."): one rank each.
            groups += [
                (1, int(m.group(1)))
                for *_, what in report.ranks
                if (m := _RANK_LAUNCHED.fullmatch(what))
            ]
            if len(groups) < 2:
                continue
            listed = {rank for rank, *_ in report.ranks}
            low = min(op for _, op in groups)
            high = max(op for _, op in groups)
            behind = sum(n for n, op in groups if op == low)
            ahead = sum(n for n, op in groups if op == high)
            listed_ahead = bool(listed) and len(listed) == ahead and ahead != behind
            culprit = () if listed_ahead else tuple(sorted(listed))
            if hosts_by_ip is None:
                hosts_by_ip = address_hosts(index)
            where = [
                (hosts_by_ip.get(node, node), pid)
                for rank, _gpu, pid, node, _what in report.ranks
                if rank in culprit and pid >= 0 and node
            ]
            title = (
                f"{behind} rank(s) never launched operation {high} that {ahead} rank(s) wait in"
                + (
                    f"; RAS lists the {ahead} waiting rank(s) {', '.join(map(str, sorted(listed)))}"
                    if listed_ahead
                    else ""
                )
            )
            yield self.finding(
                severity="error",
                title=title,
                detail=(
                    f"ncclras reports different operation counts on one communicator: {behind} "
                    f"rank(s) up to operation {low}, {ahead} up to {high}. The ranks that launched "
                    "more are waiting for the others in that collective; the ones behind are "
                    "where the job is stuck."
                    + (
                        " RAS lists only the smaller group, here the ranks ahead: the ranks behind "
                        "are the ones not listed."
                        if listed_ahead
                        else ""
                    )
                ),
                events=[report],
                ranks=culprit,
                hosts=[host for host, _ in where],
                pids=[pid for _, pid in where],
                confidence=0.6 if culprit else 0.5,
                next_steps=(
                    "Dump the stacks of the ranks behind (py-spy dump --pid PID): find the one "
                    "outside the collective.",
                    "ncclras -v lists every rank's operation count.",
                ),
            )
