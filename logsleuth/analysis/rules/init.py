"""Rules about communicator creation that never got going."""

from __future__ import annotations

import re
from collections.abc import Iterable

from logsleuth.analysis.index import EvidenceIndex
from logsleuth.analysis.rules.base import Rule
from logsleuth.model.base import Event
from logsleuth.model.diagnosis import Finding
from logsleuth.model.messages import LogMessage
from logsleuth.model.ranks import LISTED_RANKS, absent_ranks, format_ranks, name_ranks


class InitNeverReached(Rule):
    """Some ranks never started communicator initialization; the others wait in bootstrap.

    Symptom:
        Every NCCL log of a communicator ends at ``ncclCommInitRank ... nranks N ... - Init
        START``: no rank reached ``Init COMPLETE``, and the ranks that logged START are
        fewer than N. The missing ranks wrote no NCCL line at all (their process exists, in
        the bundle manifest or the launcher's list, but never called NCCL).

    Likely causes:
        The missing ranks are stuck before ``init_process_group`` or before their first
        collective: slow or hung data preparation, a download, a lock, a rank-dependent
        code path, or a wrong ``RANK``/``WORLD_SIZE`` so that they joined another job.
        NCCL's bootstrap waits for all N ranks, so the others hang in init forever (the
        watchdog does not cover it).

    What to check:
        The stacks of the missing ranks (``py-spy dump --pid PID``): where are they instead
        of ``init_process_group``? Their launcher output; ``RANK``, ``WORLD_SIZE``,
        ``MASTER_ADDR`` and ``MASTER_PORT`` on their nodes.
    """

    code = "LS110"
    name = "init.never_started"
    kind = "init-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        launched = {e.rank: e for m in index.manifests for e in m.ranks}
        # A process of that rank with NCCL lines of its own (its version, bootstrap) ran
        # NCCL and stopped before this init: its log is in the evidence, not missing.
        ran_nccl = {
            p.rank: p for p in index.procs.values() if p.rank is not None and "nccl" in p.families
        }
        for key in sorted(index.comms):
            state = index.comms[key]
            if state.completed or not state.started or not state.nranks:
                continue
            if state.nranks != index.world_size:
                continue  # only the world communicator's ranks are global ranks
            missing = absent_ranks(state.nranks, state.started, LISTED_RANKS)
            if not missing or len(missing) * 2 >= state.nranks:
                continue  # more absent than present: the logs were not all collected
            known = [r for r in missing if r in launched]
            wrote = [r for r in missing if r in ran_nccl and r not in launched]
            hosts = sorted(
                {h for r in known if (h := launched[r].host)}
                | {h for r in wrote if (h := ran_nccl[r].host)}
            )
            pids = sorted(
                [p for r in known if (p := launched[r].pid) is not None]
                + [p for r in wrote if (p := ran_nccl[r].pid) is not None]
            )
            started = sorted(state.started)
            events: list[Event] = [state.started[r] for r in started[:3]]
            events += index.manifests[:1]
            who = name_ranks(missing)
            confirmed = len(known) + len(wrote) == len(missing)
            if len(wrote) == len(missing):
                said = (
                    f"{who} logged NCCL lines of its own (its version, bootstrap) but not this "
                    "communicator's Init START: it ran and stopped before the init"
                )
            else:
                said = f"{who} logged no NCCL line of this communicator"
            detail = (
                f"{len(started)} of {state.nranks} ranks of communicator {key} logged Init START "
                f"and nothing after it; {said}. Bootstrap waits for every rank, so the others "
                "hang in init until the missing ones arrive."
            )
            if len(known) == len(missing):
                detail += (
                    f" The bundle manifest lists {who} as running (pid "
                    f"{', '.join(map(str, pids))}), so the process existed but never called NCCL."
                )
            elif not confirmed:
                detail += (
                    f" Whether {who} ran at all is not in the evidence: its log may simply be "
                    "missing from the inputs."
                )
            yield self.finding(
                severity="critical",
                title=f"{who} never started init of comm {key}; {len(started)} rank(s) wait "
                "for it in bootstrap",
                detail=detail,
                events=events,
                ranks=missing,
                hosts=hosts,
                pids=pids,
                communicator=key,
                confidence=0.75 if confirmed else 0.45,
                next_steps=(
                    f"Dump the stacks of {who}"
                    + (f" (py-spy dump --pid {pids[0]} on {hosts[0]})" if pids and hosts else "")
                    + ": where are they instead of init_process_group?",
                    "Check RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT on their nodes and "
                    "their launcher output before init.",
                    "Collect NCCL_DEBUG=INFO logs from every rank (NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log) "
                    "to tell a missing log from a rank that never reached NCCL.",
                ),
            )


_CLAIM = re.compile(r"GLOBAL_RANK: (\d{1,6}), MEMBER: (\d{1,6})/(\d{1,6})")


class DuplicateRanks(Rule):
    """Two processes claim the same global rank, so the others never join.

    Symptom:
        A framework's start-up lines name each global rank more than once (Lightning's
        ``initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8`` twice) while some members of the
        world never appear; the job hangs in process-group set-up.

    Likely causes:
        Two nodes that both believe they are node 0: the node rank is not passed (Slurm
        ``--ntasks-per-node`` not matching the devices, ``NODE_RANK``/``--node_rank`` unset,
        ``MASTER_ADDR`` different per node), so each node starts local ranks as global ranks
        0..k-1 and ranks k..N-1 are never started.

    What to check:
        The node rank each node was given (``NODE_RANK``, ``SLURM_NODEID``, torchrun's
        ``--node_rank``), ``--ntasks-per-node`` against the GPUs per node, and that every node
        uses the same ``MASTER_ADDR``/``MASTER_PORT``.
    """

    code = "LS122"
    name = "init.duplicate_ranks"
    kind = "init-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        claims: dict[int, list[LogMessage]] = {}
        world = 0
        for message in index.all_of(LogMessage):
            if (found := _CLAIM.search(message.message)) is None:
                continue
            claims.setdefault(int(found.group(1)), []).append(message)
            world = max(world, int(found.group(3)))
        twice = sorted(r for r, seen in claims.items() if len(seen) > 1)
        if not twice or not world:
            return
        missing = world - len(claims)
        if missing <= 0:
            return
        events = [m for r in twice for m in claims[r]]
        yield self.finding(
            severity="error",
            title=(
                f"global rank(s) {format_ranks(twice)} were started twice and {missing} of the "
                f"{world} members never: two nodes took the same node rank"
            ),
            detail=(
                f"The start-up lines name global rank(s) {format_ranks(twice)} more than once, "
                f"and only {len(claims)} distinct ranks of a world of {world}. Two processes that "
                "claim one rank cannot both join, and the ranks nobody started are never there: "
                "process-group initialization waits for them forever."
            ),
            events=events,
            confidence=0.7,
            next_steps=(
                "Check the node rank each node was started with (NODE_RANK, SLURM_NODEID, "
                "torchrun --node_rank): every node must have its own.",
                "Check --ntasks-per-node (Slurm) against the devices per node, and that every "
                "node uses the same MASTER_ADDR and MASTER_PORT.",
            ),
        )


_JOINED = re.compile(r"All distributed processes registered\. Starting with \d+ processes")
"""Lightning's rank 0 once every member joined: set-up ended."""


class RollCallIncomplete(Rule):
    """A framework's start-up roll call lists fewer ranks than its world, and set-up never ends.

    Symptom:
        Each rank announces that it joins the process group with its rank and the world
        size (Lightning's ``Initializing distributed: GLOBAL_RANK: 2, MEMBER: 3/4``); some
        members of the world never announce it, nothing says that every member joined
        (``All distributed processes registered``), and the missing ranks left no other line.

    Likely causes:
        The missing ranks were never started (a node that did not come up, a wrong number of
        tasks per node), crashed before set-up, or are busy before it (a download, data
        preparation on one rank); the others wait for them in the store's rendezvous.

    What to check:
        The launcher's output on the node(s) of the missing ranks; that the scheduler started
        as many tasks as the world size (``srun``'s ``--ntasks``, ``--ntasks-per-node``
        against the devices); what those ranks do before ``init_process_group``.
    """

    code = "LS128"
    name = "init.roll_call"
    kind = "init-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        claims: dict[int, LogMessage] = {}
        world = 0
        for message in index.all_of(LogMessage):
            if _JOINED.search(message.message):
                return  # every member joined
            if (found := _CLAIM.search(message.message)) is None:
                continue
            if claims.setdefault(int(found.group(1)), message) is not message:
                return  # a rank claimed twice: LS122 (init.duplicate_ranks)
            world = max(world, int(found.group(3)))
        if not claims or world > LISTED_RANKS:
            return
        # Ranks that left any other line were started; only silence counts, and only as a
        # minority of the world (most of it missing is a cut excerpt, not missing ranks).
        spoke = set(index.named_ranks())
        absent = [r for r in range(world) if r not in claims and r not in spoke]
        if not absent or len(absent) * 2 >= world:
            return
        yield self.finding(
            severity="error",
            title=(
                f"{len(claims)} of {world} ranks announced process-group set-up; "
                f"{name_ranks(absent)} never did"
            ),
            detail=(
                f"Rank(s) {format_ranks(claims)} printed that they join the process group of "
                f"{world} members, and nothing says that every member joined. "
                f"{name_ranks(absent).capitalize()} left no line at all: set-up waits for "
                f"{'it' if len(absent) == 1 else 'them'}, unless the excerpt is cut."
            ),
            events=[claims[r] for r in sorted(claims)],
            ranks=absent,
            confidence=0.4,
            next_steps=(
                f"Find {name_ranks(absent)}: the launcher output of its node, whether it was "
                "started at all (srun --ntasks, --ntasks-per-node against the GPUs per node).",
                "Dump the stacks of the ranks that joined (py-spy dump --pid PID): they should "
                "wait in init_process_group's rendezvous.",
            ),
        )


_WAITING = re.compile(
    r"(?:Waiting in store based barrier to initialize process group for|Timed out initializing "
    r"process group in store based barrier on) rank: (\d{1,6}).*?"
    r"world_size=(\d{1,6}), (?:worker_count|num_workers_joined)=(\d{1,6})"
)
_ADDED = re.compile(r"Added key: (?:store_based_barrier_key\S*) to store for rank: (\d{1,6})")
"""The barrier's own record of a rank that arrived (c10d's debug log)."""


class StoreBarrierWaiting(Rule):
    """Ranks wait in the store-based barrier of process-group set-up for ranks that never come.

    Symptom:
        ``Waiting in store based barrier to initialize process group for rank: R, key:
        store_based_barrier_key:N (world_size=W, worker_count=K, ...)`` with K < W, repeated
        until ``Timed out initializing process group in store based barrier``.

    Likely causes:
        W - K ranks never called ``init_process_group`` (or ``new_group``): they crashed or
        were never started, are still busy before it (data preparation, a download, a
        checkpoint load on one rank), or called it with another world size or store.

    What to check:
        Which ranks are missing from the barrier (the ranks that printed nothing); what those
        ranks do before ``init_process_group``; that every rank gets the same world size and
        MASTER_ADDR/MASTER_PORT.
    """

    code = "LS123"
    name = "init.store_barrier"
    kind = "init-stall"

    def check(self, index: EvidenceIndex) -> Iterable[Finding]:
        waiting: dict[int, LogMessage] = {}
        arrived: set[int] = set()
        world = joined = 0
        for message in index.all_of(LogMessage):
            if (added := _ADDED.search(message.message)) is not None:
                arrived.add(int(added.group(1)))
            if (found := _WAITING.search(message.message)) is None:
                continue
            waiting.setdefault(int(found.group(1)), message)
            world = max(world, int(found.group(2)))
            joined = max(joined, int(found.group(3)))
        if not waiting or not world or joined >= world:
            return
        missing = world - joined
        # Only when every rank that joined is in the evidence are the others known by rank.
        arrived |= set(waiting)
        absent = absent_ranks(world, arrived, missing) if len(arrived) == joined else None
        yield self.finding(
            severity="error",
            title=(
                f"{missing} of {world} rank(s) never reached the store-based barrier of "
                "process-group set-up" + (f": rank(s) {format_ranks(absent)}" if absent else "")
            ),
            detail=(
                f"Rank(s) {format_ranks(waiting)} wait in the store-based barrier with "
                f"{joined} of {world} workers joined. The rest never called "
                "init_process_group (or new_group): they are stuck or busy before it, or gone."
            ),
            events=list(waiting.values()),
            ranks=absent or (),
            # Every arrival listed: the barrier's own count names the rest, surer than its
            # timeout message alone (which names no one).
            confidence=0.75 if absent else 0.5,
            next_steps=(
                "Find the rank(s) that printed nothing and what they do before "
                "init_process_group (a data download or preparation on one rank, a crash).",
                "Check that every rank gets the same world size and MASTER_ADDR/MASTER_PORT.",
            ),
        )
