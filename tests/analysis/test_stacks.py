"""Classifying stacks and merging the processes of a job into stack classes and a STAT tree."""

from __future__ import annotations

from dataclasses import replace

from logsleuth.analysis.stack_classify import classify_dump, classify_thread, process_role
from logsleuth.analysis.stacks import (
    ProcStack,
    build_class_tree,
    build_stack_classes,
    build_stack_tree,
    find_outliers,
)
from logsleuth.model.diagnosis import StackClass
from logsleuth.model.stacks import Frame, StackDump, StackTreeNode, ThreadStack
from tests.parse.test_gdb import FIXTURES, dumps, read
from tests.parse.test_stacks import read_dumps

GLOO = [f"gloo-hang_pyspy-0.4.3_rank_pid{pid}.txt" for pid in (13270, 13271, 13272, 13273)]


def read_gdb(name: str) -> list[StackDump]:
    """Return the dumps of a gdb fixture, read through the dispatcher."""
    assert (FIXTURES / name).is_file()
    return dumps(read(name))


def gloo_procs() -> list[ProcStack]:
    """The four ranks of the hung gloo job, rank i = pid 13270 + i."""
    procs = []
    for rank, name in enumerate(GLOO):
        (dump,) = read_dumps(name)
        procs.append(ProcStack(rank, "node0", dump.pid, dump))
    return procs


def thread(*frames: tuple[str, str, int | None], native: bool = False) -> ThreadStack:
    """A main thread from ``(func, file, line)`` rows, innermost first."""
    return ThreadStack(
        tid=1,
        name="MainThread",
        state="idle",
        frames=tuple(Frame(func=f, file=p, line=n, native=native) for f, p, n in frames),
        is_main=True,
    )


# ---- classify_thread -----------------------------------------------------------------------


def test_gloo_ranks_main_threads() -> None:
    assert [classify_thread(p.dump.threads[0]) for p in gloo_procs()] == [
        ("collective", "all_reduce", "train_step (hang_dist.py:15)"),
        ("collective", "all_reduce", "train_step (hang_dist.py:15)"),
        ("collective", "barrier", "main (hang_dist.py:26)"),
        ("data-loading", None, "main (hang_dist.py:23)"),
    ]


def test_dataloader_worker_points_at_the_dataset() -> None:
    dumps = read_dumps("gloo-hang_pyspy-0.4.3_torchrun_agent_subprocesses.txt")
    worker = next(d for d in dumps if d.pid == 13363)
    assert classify_dump(worker) == (
        "data-loading",
        None,
        "SlowDataset.__getitem__ (hang_dist.py:8)",
    )


def test_process_roles_in_a_subprocesses_dump() -> None:
    dumps = read_dumps("gloo-hang_pyspy-0.4.3_torchrun_agent_subprocesses.txt")
    assert [(d.pid, process_role(d)) for d in dumps] == [
        (13167, "launcher"),
        (13270, "rank"),
        (13273, "rank"),
        (13363, "dataloader-worker"),
        (13361, "dataloader-worker"),
        (13272, "rank"),
        (13271, "rank"),
    ]
    spawn = read_dumps("pyspy-0.4.3_py3.11_multiprocessing_spawn_subprocesses.txt")
    assert [process_role(d) for d in spawn] == ["rank", "helper", "rank", "rank"]


def test_corpus_018_stale_filebaton_is_a_lock_in_deepspeed_jit_load() -> None:
    (dump,) = read_dumps("corpus018_pyspy_stale_jit_filebaton_rank0.txt")
    main, tqdm = dump.threads
    # The lock is torch's FileBaton; the call site is the DeepSpeed op build that took it,
    # which says more than the user line `main (main.py:273)` calling deepspeed.initialize.
    assert classify_thread(main) == (
        "lock",
        None,
        "jit_load (deepspeed/ops/op_builder/builder.py:480)",
    )
    assert classify_thread(tqdm) == ("lock", None, None)
    (stack_class,) = build_stack_classes([ProcStack(0, None, 46930, dump)])
    assert stack_class.frames[:4] == (
        "wait (torch/utils/file_baton.py:42)",
        "_jit_compile (torch/utils/cpp_extension.py:1522)",
        "load (torch/utils/cpp_extension.py:1284)",
        "jit_load (deepspeed/ops/op_builder/builder.py:480)",
    )


def test_qualified_and_plain_names_classify_alike() -> None:
    (old,) = read_dumps("gloo-hang_pyspy-0.3.14_rank0.txt")
    (new,) = read_dumps("gloo-hang_pyspy-0.4.3_rank_pid13270.txt")
    assert classify_dump(old) == classify_dump(new)
    (old3,) = read_dumps("gloo-hang_pyspy-0.3.14_rank3_subprocesses_CORRUPTED_interleaving.txt")[:1]
    assert classify_dump(old3) == ("data-loading", None, "main (hang_dist.py:23)")


def test_native_frames_do_not_hide_the_collective() -> None:
    (dump,) = read_dumps("gloo-hang_pyspy-0.4.3_rank0_native.txt")
    assert classify_dump(dump) == ("collective", "all_reduce", "train_step (hang_dist.py:15)")


def test_threads_sample_categories() -> None:
    (dump,) = read_dumps("pyspy-0.4.3_py3.11_threads_native.txt")
    assert [classify_thread(t) for t in dump.threads] == [
        ("lock", None, "main_loop (threads.py:26)"),
        ("lock", None, "waiter (threads.py:7)"),
        ("lock", None, "getter (threads.py:9)"),
        ("lock", None, "locker (threads.py:11)"),
        ("unknown", None, "busy (threads.py:16)"),
        ("sleep", None, "<lambda> (threads.py:21)"),
    ]


def test_faulthandler_absolute_paths() -> None:
    (dump,) = read_dumps("faulthandler_dump_traceback_py3.11.7.txt")
    assert [classify_thread(t) for t in dump.threads] == [
        ("unknown", None, "sleeper (/home/train/job/fh_dump.py:6)"),
        ("lock", None, "worker (/home/train/job/fh_dump.py:4)"),
        ("unknown", None, "step (/home/train/job/fh_dump.py:12)"),
    ]


def test_backward_on_main_thread_defers_to_the_autograd_collective() -> None:
    (dump,) = read_dumps("issue_accelerate-3104_zero3_backward_vs_allgather.txt")
    user = "training_loop (src/model_back/healing/scripts/fine_tune_accelerate.py:410)"
    assert classify_thread(dump.threads[0]) == ("compute", None, user)
    assert classify_thread(dump.threads[2]) == ("idle", None, None)
    assert classify_dump(dump) == ("collective", "all_gather_into_tensor", user)


def test_framework_wrappers_map_to_the_collective() -> None:
    deepspeed = thread(
        ("log_wrapper", "deepspeed/comm/comm.py", 117),
        ("allgather_fn", "deepspeed/comm/comm.py", 330),
        ("fetch_sub_module", "deepspeed/runtime/zero/partitioned_param_coordinator.py", 380),
        ("forward", "model.py", 40),
    )
    assert classify_thread(deepspeed) == (
        "collective",
        "all_gather_into_tensor",
        "forward (model.py:40)",
    )
    megatron = thread(
        ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py", 380),
        ("recv_forward", "megatron/core/pipeline_parallel/p2p_communication.py", 450),
        ("forward_backward_pipelining", "megatron/core/pipeline_parallel/schedules.py", 1300),
        ("train_step", "megatron/training/training.py", 700),
        ("pretrain", "megatron/training/training.py", 300),
        ("<module>", "pretrain_gpt.py", 250),
    )
    assert classify_thread(megatron) == (
        "collective",
        "batch_isend_irecv",
        "<module> (pretrain_gpt.py:250)",
    )


def test_barrier_inside_init_process_group_is_init() -> None:
    init = thread(
        (
            "barrier",
            "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
            4,
        ),
        ("init_process_group", "torch/distributed/distributed_c10d.py", 1500),
        ("wrapper", "torch/distributed/c10d_logger.py", 79),
        ("setup", "/home/u/train.py", 12),
    )
    assert classify_thread(init) == ("init", "barrier", "setup (/home/u/train.py:12)")


def test_compute_io_and_idle() -> None:
    cuda = thread(
        ("synchronize", "torch/cuda/__init__.py", 985),
        ("train_step", "train.py", 30),
    )
    assert classify_thread(cuda) == ("compute", None, "train_step (train.py:30)")
    save = thread(
        ("_save", "torch/serialization.py", 881),
        ("save", "torch/serialization.py", 629),
        ("save_checkpoint", "train.py", 80),
    )
    assert classify_thread(save) == ("io", None, "save_checkpoint (train.py:80)")
    assert classify_thread(thread()) == ("idle", None, None)


# ---- build_stack_classes / find_outliers ------------------------------------------------------


def test_gloo_job_merges_into_three_classes() -> None:
    classes = build_stack_classes(gloo_procs())
    assert [(c.ranks, c.count, c.category, c.collective, c.call_site) for c in classes] == [
        ("0-1", 2, "collective", "all_reduce", "train_step (hang_dist.py:15)"),
        ("2", 1, "collective", "barrier", "main (hang_dist.py:26)"),
        ("3", 1, "data-loading", None, "main (hang_dist.py:23)"),
    ]
    assert classes[0] == StackClass(
        ranks="0-1",
        count=2,
        frames=(
            "all_reduce (torch/distributed/distributed_c10d.py:3252)",
            "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
            "train_step (hang_dist.py:15)",
            "main (hang_dist.py:28)",
            "<module> (hang_dist.py:31)",
        ),
        category="collective",
        call_site="train_step (hang_dist.py:15)",
        collective="all_reduce",
        pids=(13270, 13271),
        hosts=("node0",),
        libraries=("torch", "torch", None, None, None),
    )
    suspects = find_outliers(classes)
    assert [(s.kind, s.stack_class.ranks, s.reason) for s in suspects] == [
        (
            "non-collective",
            "3",
            "3 of 4 processes wait in a collective (all_reduce: 2, barrier: 1); "
            "1 process is in data-loading at main (hang_dist.py:23) instead",
        ),
        ("other-collective", "2", "2 of 4 processes wait in all_reduce; 1 process is in barrier"),
    ]


def test_classes_are_deterministic_regardless_of_input_order() -> None:
    procs = gloo_procs()
    assert build_stack_classes(procs) == build_stack_classes(procs[::-1])


def test_unknown_ranks_are_named_by_pid_and_duplicates_count_once() -> None:
    name = "gloo-hang_pyspy-0.3.14_rank3_subprocesses_CORRUPTED_interleaving.txt"
    procs = [ProcStack(None, None, d.pid, d) for d in read_dumps(name)]
    classes = build_stack_classes(procs)
    assert [(c.ranks, c.count, c.pids, c.category) for c in classes] == [
        ("", 2, (13361, 13363), "data-loading"),
        ("", 1, (13273,), "data-loading"),
    ]
    assert classes[0].call_site == "__getitem__ (hang_dist.py:8)"


def test_text_and_native_dumps_of_one_stack_merge() -> None:
    (text,) = read_dumps("gloo-hang_pyspy-0.3.14_rank0.txt")
    (native,) = read_dumps("gloo-hang_pyspy-0.4.3_rank0_native.txt")
    (merged,) = build_stack_classes([ProcStack(0, "a", 1, text), ProcStack(1, "b", 2, native)])
    assert (merged.ranks, merged.count, merged.hosts) == ("0-1", 2, ("a", "b"))
    assert merged.frames[0] == "all_reduce (torch/distributed/distributed_c10d.py:3252)"


def synthetic_job(size: int, straggler: int) -> list[ProcStack]:
    """``size`` ranks blocked in all_reduce except ``straggler``, stuck in DataLoader.__next__."""
    (healthy,) = read_dumps(GLOO[0])
    (stuck,) = read_dumps(GLOO[3])
    procs = []
    for rank in range(size):
        dump = stuck if rank == straggler else healthy
        pid = 20000 + rank
        procs.append(ProcStack(rank, f"node{rank // 8:03d}", pid, replace(dump, pid=pid)))
    return procs


def test_1024_ranks_with_one_dataloader_straggler() -> None:
    procs = synthetic_job(1024, straggler=517)
    classes = build_stack_classes(procs)
    assert [(c.ranks, c.count, c.category) for c in classes] == [
        ("0-516,518-1023", 1023, "collective"),
        ("517", 1, "data-loading"),
    ]
    assert (classes[1].pids, classes[1].hosts) == ((20517,), ("node064",))
    (suspect,) = find_outliers(classes)
    assert (suspect.kind, suspect.stack_class.ranks, suspect.stack_class.pids) == (
        "non-collective",
        "517",
        (20517,),
    )
    assert suspect.reason == (
        "1023 of 1024 processes wait in a collective (all_reduce: 1023); "
        "1 process is in data-loading at main (hang_dist.py:23) instead"
    )


def test_no_collective_majority_means_no_suspects() -> None:
    procs = synthetic_job(4, straggler=0)
    procs = [replace(p, dump=procs[0].dump) if p.rank in (1, 2) else p for p in procs]
    classes = build_stack_classes(procs)
    assert [(c.count, c.category) for c in classes] == [(3, "data-loading"), (1, "collective")]
    assert find_outliers(classes) == ()


# ---- build_stack_tree ------------------------------------------------------------------------


def test_stack_tree_splits_where_ranks_diverge() -> None:
    root = build_stack_tree(gloo_procs())
    assert (root.frame, root.count, root.members()) == ("", 4, "0-3")
    (module,) = root.children
    assert (module.frame, module.members()) == ("<module> (hang_dist.py:31)", "0-3")
    assert [(c.frame, c.members()) for c in module.children] == [
        ("main (hang_dist.py:28)", "0-1"),
        ("main (hang_dist.py:26)", "2"),
        ("main (hang_dist.py:23)", "3"),
    ]
    leaf = module.children[0]
    while leaf.children:
        (leaf,) = leaf.children
    assert (leaf.frame, leaf.ranks) == (
        "all_reduce (torch/distributed/distributed_c10d.py:3252)",
        (0, 1),
    )


def test_stack_tree_of_1024_ranks_and_of_processes_without_ranks() -> None:
    root = build_stack_tree(synthetic_job(1024, straggler=517))
    (module,) = root.children
    assert [(c.count, c.members()) for c in module.children] == [
        (1023, "0-516,518-1023"),
        (1, "517"),
    ]
    dumps: list[StackDump] = read_dumps("pyspy-0.4.3_py3.11_multiprocessing_spawn_subprocesses.txt")
    root = build_stack_tree([ProcStack(None, None, d.pid, d) for d in dumps])
    assert root.members() == "pid 5781,5908,5909,5910"
    assert [(c.frame, c.members()) for c in root.children] == [
        ("<module> (<string>:1)", "pid 5908,5909,5910"),
        ("<module> (mp.py:9)", "pid 5781"),
    ]


# ---- build_class_tree ------------------------------------------------------------------------


def test_class_tree_is_the_process_tree_with_the_classes_at_its_leaves() -> None:
    procs = gloo_procs()
    by_class = build_class_tree(build_stack_classes(procs))
    by_process = build_stack_tree(procs)

    def shape(node: StackTreeNode) -> tuple[object, ...]:
        return (node.frame, node.members(), node.library, tuple(shape(c) for c in node.children))

    assert shape(by_class) == shape(by_process)
    leaves = []
    stack = [by_class]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.category is not None:
            leaves.append((node.members(), node.category, node.collective, node.suspect))
    assert sorted(leaves) == [
        ("0-1", "collective", "all_reduce", None),
        ("2", "collective", "barrier", "other-collective"),
        ("3", "data-loading", None, "non-collective"),
    ]
    (module,) = by_class.children
    assert (module.library, module.children[2].children[0].library) == (None, "torch")


def test_class_tree_of_1024_ranks_names_the_straggler_branch() -> None:
    root = build_class_tree(build_stack_classes(synthetic_job(1024, straggler=517)))
    (module,) = root.children
    healthy, straggler = module.children
    assert (healthy.members(), straggler.members()) == ("0-516,518-1023", "517")
    while straggler.children:
        (straggler,) = straggler.children
    assert (straggler.frame, straggler.category, straggler.suspect) == (
        "_PollLikeSelector.select (selectors.py:415)",
        "data-loading",
        "non-collective",
    )


# ---- gdb stacks ------------------------------------------------------------------------------


def test_gdb_main_thread_classifies_like_py_spy() -> None:
    (bt,) = read_gdb("gloo-hang_gdb_thread_apply_all_bt_rank0.txt")
    (py_bt,) = read_gdb("gloo-hang_gdb_thread_apply_all_py-bt_rank0.txt")
    assert classify_dump(bt)[:2] == ("collective", "wait")  # only c10d::Work::wait says so
    assert classify_dump(py_bt) == (
        "collective",
        "all_reduce",
        "train_step (/home/train/job/hang_dist.py:15)",
    )


def test_stack_tree_of_all_threads_counts_each_process_once_per_frame() -> None:
    root = build_stack_tree(gloo_procs(), all_threads=True)
    assert [(c.frame, c.members()) for c in root.children] == [
        ("<module> (hang_dist.py:31)", "0-3"),
        ("Thread._bootstrap (threading.py:1002)", "3"),  # rank 3's two QueueFeederThreads
    ]
    feeder = root.children[1]
    while feeder.children:
        (feeder,) = feeder.children
    assert (feeder.frame, feeder.count) == ("Condition.wait (threading.py:327)", 1)
    assert build_stack_tree(gloo_procs()).children == root.children[:1]
