"""What MPI launchers report of the rank that ended a job: Open MPI, MPICH and Intel MPI.

Horovod, mpi4py and torch jobs started by ``mpirun``/``mpiexec`` end with the launcher's box
naming one rank; that rank is the culprit, the others were killed by the runtime.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logsleuth.api import analyze

SHUTDOWN = (
    "[1,{rank}]<stderr>:horovod.common.exceptions.HorovodInternalError: Horovod has been shut "
    "down. This was caused by an exception on one of the ranks or an attempt to allreduce, "
    "allgather or broadcast a tensor after one of the ranks finished execution.\n"
)
RULE = "-" * 74 + "\n"

OPEN_MPI_FIRST = (
    RULE + "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
    "the job to be terminated. The first process to do so was:\n\n"
    "  Process name: [[41873,1],5]\n  Exit code:    1\n" + RULE
)
OPEN_MPI_ABORT = (
    RULE + "MPI_ABORT was invoked on rank 5 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n\n"
    "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n"
    "You may or may not see output from other processes, depending on\n"
    "exactly when Open MPI kills them.\n" + RULE
)
MPICH_ABORT = (
    "Abort(1) on node 5 (rank 5 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - "
    "process 5\n"
)
HYDRA = (
    "\n" + "=" * 83 + "\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   RANK 5 PID 88123 RUNNING AT cn-0412\n=   KILLED BY SIGNAL: 9 (Killed)\n" + "=" * 83 + "\n"
)
IMPROPER = RULE + "mpirun has exited due to process rank 5 with PID 0 on\n"


@pytest.mark.parametrize(
    "report",
    [OPEN_MPI_FIRST, OPEN_MPI_ABORT, MPICH_ABORT, HYDRA, IMPROPER],
    ids=["open-mpi-first", "open-mpi-abort", "mpich-abort", "hydra", "improper"],
)
def test_the_rank_the_launcher_names_is_the_culprit_not_those_it_killed(
    tmp_path: Path, report: str
) -> None:
    log = tmp_path / "mpirun.log"
    log.write_text("".join(SHUTDOWN.format(rank=rank) for rank in (0, 1, 2)) + report)
    result = analyze([str(log)])
    verdict = result.diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("process-died", (5,))
    (summary,) = result.diagnosis.inputs
    # Every line of the launcher's box is accounted for as one of its own.
    assert summary.unrecognized == 0


def test_hydra_names_the_node_and_pid_of_the_rank_it_saw_killed(tmp_path: Path) -> None:
    log = tmp_path / "job.err"
    log.write_text(HYDRA)
    verdict = analyze([str(log)]).diagnosis.verdict
    assert (verdict.culprit_hosts, verdict.culprit_pids) == (("cn-0412",), (88123,))
