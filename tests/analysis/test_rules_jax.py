"""LS126 jax.coordination: the tasks JAX's coordination service names as late or dead."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze

BARRIER = (
    "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: "
    "PjitFunction(step)::0. This usually happens because a task triggered the barrier too "
    "early or too slowly. Please look at the task logs (both timed out and first task) to "
    "debug further.\n"
    "# of tasks that reached the barrier: {reached}/{tasks}.\n"
    "The first task at the barrier: /job:jax_worker/replica:0/task:0. Some timed out task "
    "names:\n"
)


def _verdict(tmp_path: Path, text: str) -> tuple[str, tuple[int, ...], str]:
    log = tmp_path / "jax.log"
    log.write_text(text, encoding="utf-8")
    verdict = analyze([str(log)]).diagnosis.verdict
    return verdict.kind, verdict.culprit_ranks, verdict.code or ""


def test_the_tasks_a_barrier_timed_out_on_are_the_culprits(tmp_path: Path) -> None:
    text = BARRIER.format(reached=6, tasks=8) + (
        "/job:jax_worker/replica:0/task:5\n/job:jax_worker/replica:0/task:7\n"
    )
    assert _verdict(tmp_path, text) == ("missing-collective", (5, 7), "LS126")


def test_the_first_task_at_the_barrier_is_a_waiter_not_a_culprit(tmp_path: Path) -> None:
    text = BARRIER.format(reached=7, tasks=8) + "/job:jax_worker/replica:0/task:3\n"
    assert _verdict(tmp_path, text)[1] == (3,)


def test_a_task_without_heartbeats_died(tmp_path: Path) -> None:
    text = (
        "E0612 11:20:03.445210  140233 coordination_service.cc:351] Task "
        "/job:jax_worker/replica:0/task:2 heartbeat timeout. This indicates that the remote "
        "task has failed, got preempted, or crashed unexpectedly.\n"
        "F0612 11:20:03.446011  140220 client.cc:74] Terminating process because the JAX "
        "distributed service detected fatal errors. This most likely indicates that another "
        "task died; see the other task logs for more details.\n"
    )
    assert _verdict(tmp_path, text) == ("process-died", (2,), "LS126")


def test_a_task_line_without_a_list_header_blames_nobody(tmp_path: Path) -> None:
    text = "/job:jax_worker/replica:0/task:3\nEpoch 1 step 20 loss 2.1\n"
    assert _verdict(tmp_path, text)[2] != "LS126"
