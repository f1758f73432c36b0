"""LS126 jax.coordination: the tasks the coordination service (JAX, TensorFlow) names as late, dead or unreachable."""

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


def test_a_barrier_that_ends_a_traceback_names_its_late_tasks(tmp_path: Path) -> None:
    # The barrier's error as the exception line under the frames of the call that raised it.
    frames = (
        "Traceback (most recent call last):\n"
        '  File "/deps/MaxText/train.py", line 785, in <module>\n'
        "    app.run(main)\n"
        '  File "/usr/local/lib/python3.10/site-packages/jax/_src/distributed.py", line 118, '
        "in initialize\n"
        "    self.client.connect()\n"
    )
    text = frames + BARRIER.format(reached=3, tasks=4) + "/job:jax_worker/replica:0/task:2\n"
    assert _verdict(tmp_path, text)[:2] == ("missing-collective", (2,))


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


TF_ABORTED = (
    "2026-11-23 10:31:07.654321: E tensorflow/core/common_runtime/base_collective_executor.cc"
    ":249] BaseCollectiveExecutor::StartAbort {status}: Collective ops is aborted by: {why}\n"
    "Additional GRPC error information from remote target /job:worker/replica:0/task:2:\n"
    ':{{"created":"@1700733067.654000000","description":"{why}","grpc_status":{code}}}\n'
    "The error could be from a previous operation. Restart your program to reset.\n"
    "\t [[{{{{node CollectiveReduceV2}}}}]] [Op:__inference_train_function_5123]\n"
)


def test_a_tensorflow_task_that_cannot_be_reached_died(tmp_path: Path) -> None:
    """MultiWorkerMirroredStrategy's collectives abort when a worker's gRPC server is gone."""
    text = TF_ABORTED.format(
        status="UNAVAILABLE", why="failed to connect to all addresses", code=14
    )
    assert _verdict(tmp_path, text) == ("process-died", (2,), "LS126")
    title = analyze([str(tmp_path)]).diagnosis.findings[0].title
    assert title == "Task(s) 2 of /job:worker could not be reached over gRPC"


def test_an_error_a_reachable_task_returned_blames_nobody(tmp_path: Path) -> None:
    text = TF_ABORTED.format(status="INVALID_ARGUMENT", why="Shape mismatch in tuple", code=3)
    assert _verdict(tmp_path, text)[2] != "LS126"


def test_a_tensorflow_task_without_heartbeats_died(tmp_path: Path) -> None:
    text = (
        "2026-11-23 11:00:00.000002: E tensorflow/tsl/distributed_runtime/coordination/"
        "coordination_service_agent.cc:511] Polled an error from coordination service (this "
        "can be an error from this or another task).\n"
        "UNAVAILABLE: Task /job:worker/replica:0/task:1 heartbeat timeout. This indicates that "
        "the remote task has failed, got preempted, or crashed unexpectedly.\n"
    )
    assert _verdict(tmp_path, text) == ("process-died", (1,), "LS126")


def test_a_task_list_joined_to_its_header_line_names_its_tasks(tmp_path: Path) -> None:
    # A paste that lost the list's line break: the task stands on the header's line.
    text = (
        "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: The following tasks are unhealthy "
        "(stopped sending heartbeats): /job:jax_worker/replica:0/task:3\n"
    )
    assert _verdict(tmp_path, text) == ("process-died", (3,), "LS126")
    text = (
        "DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: PjRT_Client_Connect. The first task "
        "at the barrier: /job:jax_worker/replica:0/task:0. Timed out task names: "
        "/job:jax_worker/replica:0/task:1\n"
    )
    assert _verdict(tmp_path, text) == ("init-stall", (1,), "LS126")


def test_tasks_late_at_the_start_up_barrier_never_joined_the_job(tmp_path: Path) -> None:
    # jax.distributed.initialize's connect barrier: the job never started, nothing diverged.
    text = (
        "2024-06-02 18:22:41.017523: E external/xla/xla/pjrt/distributed/client.cc:134] Failed "
        "to connect to distributed JAX controller: DEADLINE_EXCEEDED: Barrier timed out. Id: "
        "PjRT_Client_Connect. This usually happens because a task triggered the barrier too "
        "early or too slowly.\n# of tasks that reached the barrier: 3/4.\n"
        "The first task at the barrier: /job:jax_worker/replica:0/task:0. Some timed out task "
        "names:\n/job:jax_worker/replica:0/task:2\n"
    )
    assert _verdict(tmp_path, text) == ("init-stall", (2,), "LS126")
    # A barrier of a jitted step is no start-up: the late task diverged.
    text = BARRIER.format(reached=3, tasks=4) + "/job:jax_worker/replica:0/task:2\n"
    assert _verdict(tmp_path, text) == ("missing-collective", (2,), "LS126")
