"""Say what a stack is doing: where a thread waits, where its call site is, what a process is.

:func:`classify_thread` names where a stack waits (a collective, the DataLoader, a lock, ...)
from tables of frame signatures; :func:`classify_dump` does it for a process;
:func:`process_role` tells ranks from data-loader workers, launchers and helpers.

Frames are matched by short function name (py-spy 0.4.3 prints qualified names, older
versions and faulthandler print ``co_name``) and library-relative file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from logsleuth.model.stacks import Frame, StackDump, ThreadStack

CATEGORIES = (
    "collective",
    "init",
    "data-loading",
    "compute",
    "lock",
    "io",
    "sleep",
    "idle",
    "unknown",
)
"""Where a thread can be, as :func:`classify_thread` names it."""


# ---- where a file belongs ------------------------------------------------------------------

_SITE_PACKAGES = re.compile(r"^.*?/(?:site|dist)-packages/")
_STDLIB_DIR = re.compile(r"^.*?/(?:lib/python\d[\d.]*t?|Lib)/")

_LIBRARIES = frozenset(
    {
        "torch", "torchvision", "torchaudio", "torchdata", "triton", "numpy", "deepspeed",
        "megatron", "accelerate", "transformers", "apex", "transformer_engine", "fairscale",
        "lightning", "pytorch_lightning", "peft", "trl", "colossalai", "nemo", "composer",
        "vllm", "sglang", "tqdm", "filelock", "safetensors", "huggingface_hub", "datasets",
        "diffusers", "timm", "fsspec", "s3fs", "botocore", "boto3", "requests", "urllib3",
        "ray", "hydra", "omegaconf", "wandb", "tensorboard", "mlflow", "zmq", "gevent",
    }
)  # fmt: skip
"""Top-level packages that are never the user's own code."""

_FRAMEWORKS = frozenset(
    {
        "deepspeed", "megatron", "accelerate", "transformers", "lightning", "pytorch_lightning",
        "peft", "trl", "colossalai", "nemo", "composer", "vllm", "sglang", "huggingface_hub",
        "datasets", "diffusers", "timm",
    }
)  # fmt: skip
"""Libraries that own operations of their own (JIT-building an op, downloading a model):
the call site of a lock, I/O or sleep may be in one of them (see :func:`classify_thread`)."""


@lru_cache(maxsize=1 << 14)
def module_path(file: str | None) -> str:
    """Return ``file`` relative to its library root (``torch/distributed/distributed_c10d.py``).

    py-spy already prints that form; faulthandler, ``--full-filenames`` and ``--core``
    print absolute paths, which are cut at ``site-packages/``, the stdlib directory or the
    first directory named like a known library.
    """
    if not file:
        return ""
    path = file.replace("\\", "/")
    if not path.startswith("/") and ":/" not in path:
        return path
    if match := _SITE_PACKAGES.match(path):
        return path[match.end() :]
    if match := _STDLIB_DIR.match(path):
        return path[match.end() :]
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in _LIBRARIES:
            return "/".join(parts[i:])
    return path


def _library(frame: Frame) -> str | None:
    """Return the library ``frame`` runs in (``torch``, ``threading``), or None for user code."""
    if frame.native:
        return "native"
    file = frame.file or ""
    if file.startswith("<frozen"):
        return "stdlib"
    if file.startswith("<"):  # <string> (python -c), <stdin>
        return None
    normalized = file.replace("\\", "/")
    if _SITE_PACKAGES.match(normalized) or _STDLIB_DIR.match(normalized):
        return "stdlib" if not _SITE_PACKAGES.match(normalized) else _top(module_path(file))
    top = _top(module_path(file))
    if top in _LIBRARIES:
        return top
    if top in sys.stdlib_module_names and not normalized.startswith("/"):
        return "stdlib"
    return None


def frame_library(frame: Frame) -> str | None:
    """Return the library ``frame`` runs in (``torch``, ``stdlib``, ``native``); None for user code."""
    return _library(frame)


def _top(path: str) -> str:
    first = path.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def short_name(func: str) -> str:
    """Return the last component of a qualified Python name (``Condition.wait`` -> ``wait``)."""
    return func.rsplit(".", 1)[-1] if "." in func else func


def frame_label(frame: Frame) -> str:
    """Return ``frame`` as reports print it: ``func (file:line)``."""
    file = frame.file or "???"
    return f"{frame.func} ({file}:{frame.line})" if frame.line else f"{frame.func} ({file})"


# ---- signatures: which frames say what a thread is doing -------------------------------------

_Rule = tuple[str, frozenset[str] | None]
"""(module path or directory prefix, short function names or None for any)."""


def _rules(*pairs: tuple[str, Iterable[str] | None]) -> tuple[_Rule, ...]:
    return tuple((path, None if funcs is None else frozenset(funcs)) for path, funcs in pairs)


_C10D = "torch/distributed/distributed_c10d.py"
_C10D_OPS = frozenset(
    {
        "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
        "all_gather_object", "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor",
        "reduce", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier",
        "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv",
        "batch_isend_irecv", "gather", "gather_object", "scatter", "scatter_object_list",
        "send_object_list", "recv_object_list", "_all_gather_base", "_reduce_scatter_base",
    }
)  # fmt: skip
_OP_ALIASES = {
    "_all_gather_base": "all_gather_into_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
}

_WRAPPERS: tuple[tuple[str, Mapping[str, str]], ...] = (
    (
        "torch/distributed/_functional_collectives.py",
        {
            "all_reduce": "all_reduce",
            "all_gather_tensor": "all_gather_into_tensor",
            "reduce_scatter_tensor": "reduce_scatter_tensor",
            "all_to_all_single": "all_to_all_single",
            "broadcast": "broadcast",
            "wait_tensor": "wait",
        },
    ),
    (
        "deepspeed/comm/",
        {
            **{op: op for op in _C10D_OPS if not op.startswith("_")},
            "inference_all_reduce": "all_reduce",
            "allgather_fn": "all_gather_into_tensor",
            "all_gather_base": "all_gather_into_tensor",
            "reduce_scatter_fn": "reduce_scatter_tensor",
            "reduce_scatter_base": "reduce_scatter_tensor",
        },
    ),
    ("deepspeed/runtime/comm/", {"reduce_scatter_coalesced": "reduce_scatter"}),
    (
        "megatron/core/tensor_parallel/mappings.py",
        {
            "_reduce": "all_reduce",
            "_gather_along_first_dim": "all_gather_into_tensor",
            "_gather_along_last_dim": "all_gather",
            "_reduce_scatter_along_first_dim": "reduce_scatter_tensor",
            "_reduce_scatter_along_last_dim": "reduce_scatter_tensor",
            "all_to_all": "all_to_all_single",
        },
    ),
    (
        "megatron/core/pipeline_parallel/p2p_communication.py",
        {
            "recv_forward": "recv",
            "recv_backward": "recv",
            "send_forward": "send",
            "send_backward": "send",
            "_communicate": "batch_isend_irecv",
            "_batched_p2p_ops": "batch_isend_irecv",
            "_p2p_ops": "batch_isend_irecv",
        },
    ),
    (
        "torch/distributed/fsdp/",
        {
            "_all_gather_flat_param": "all_gather_into_tensor",
            "foreach_all_gather": "all_gather_into_tensor",
            "foreach_all_gather_copy_out": "all_gather_into_tensor",
            "wait_for_unshard": "all_gather_into_tensor",
            "foreach_reduce": "reduce_scatter_tensor",
            "_reduce_grad": "reduce_scatter_tensor",
        },
    ),
)
"""DeepSpeed, Megatron, FSDP and functional-collective frames, mapped to the torch.distributed
call they make; used when the ``distributed_c10d.py`` frame itself is not on the stack."""

_NATIVE_WORK_WAIT = re.compile(r"^c10d::.*Work.*::wait$")

_INIT = _rules(
    (
        _C10D,
        {
            "init_process_group", "_store_based_barrier", "new_group", "_new_group_with_tag",
            "new_subgroups", "new_subgroups_by_enumeration",
        },
    ),
    ("torch/distributed/rendezvous.py", None),
    ("torch/distributed/elastic/rendezvous/", None),
    ("torch/distributed/device_mesh.py", {"init_device_mesh", "_init_process_groups", "__init__"}),
    ("deepspeed/comm/comm.py", {"init_distributed"}),
    ("megatron/core/parallel_state.py", {"initialize_model_parallel"}),
    ("megatron/training/initialize.py", None),
    ("megatron/initialize.py", None),
)  # fmt: skip
_DATA_LOADING = _rules(("torch/utils/data/", None), ("torchdata/", None))
_LOCK = _rules(
    ("threading.py", {"wait", "acquire", "join", "_wait_for_tstate_lock", "__enter__"}),
    ("torch/utils/file_baton.py", None),
    ("filelock/", None),
    ("multiprocessing/synchronize.py", None),
    ("asyncio/locks.py", None),
    ("concurrent/futures/_base.py", {"result", "wait", "as_completed"}),
    ("queue.py", {"get", "put", "join"}),
)
_IO = _rules(
    ("torch/serialization.py", None), ("torch/distributed/checkpoint/", None),
    ("safetensors/", None), ("socket.py", None), ("ssl.py", None), ("http/", None),
    ("urllib/", None), ("urllib3/", None), ("requests/", None), ("huggingface_hub/", None),
    ("fsspec/", None), ("s3fs/", None), ("botocore/", None), ("boto3/", None),
    ("selectors.py", None), ("subprocess.py", None), ("shutil.py", None), ("tarfile.py", None),
    ("zipfile", None), ("gzip.py", None), ("tempfile.py", None), ("pathlib", None),
    ("multiprocessing/connection.py", None),
)  # fmt: skip
_COMPUTE = _rules(
    ("torch/cuda/", None), ("torch/autograd/", None), ("torch/_tensor.py", {"backward"}),
    ("torch/nn/modules/", None), ("torch/nn/parallel/", None), ("torch/optim/", None),
    ("torch/_dynamo/", None), ("torch/_inductor/", None), ("torch/_functorch/", None),
    ("torch/_ops.py", None), ("triton/", None),
)  # fmt: skip
_SLEEP = _rules(("asyncio/tasks.py", {"sleep"}))
_TABLES: tuple[tuple[str, tuple[_Rule, ...]], ...] = (
    ("init", _INIT),
    ("data-loading", _DATA_LOADING),
    ("lock", _LOCK),
    ("io", _IO),
    ("compute", _COMPUTE),
    ("sleep", _SLEEP),
)
"""The categories told by Python frames, with their signature tables."""

_NATIVE_INIT = re.compile(
    r"ncclCommInit|bootstrap(Init|NetAccept|Connect|AllGather)|initTransportsRank|"
    r"c10d::TCPStore::(wait|get|doWait|doGet)|c10d::ProcessGroupNCCL::(getNCCLComm|initNCCLComm)"
)
"""Native frames of communicator creation and rendezvous (gdb stacks, py-spy ``--native``)."""
_NATIVE_LOCK = frozenset({"PyThread_acquire_lock_timed", "lock_PyThread_acquire_lock"})
_NATIVE_COMPUTE = re.compile(r"Synchronize|cudaMemcpy|_local_scalar_dense")
_NATIVE_SLEEP = frozenset(
    {"time_sleep", "pysleep", "clock_nanosleep", "__clock_nanosleep", "nanosleep", "__nanosleep"}
)


def _matches_at(path: str, func: str, rules: tuple[_Rule, ...]) -> bool:
    for prefix, funcs in rules:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            if funcs is None or short_name(func) in funcs:
                return True
        elif not prefix.endswith((".py", "/")) and path.startswith(prefix):
            return True  # a module that is a file in one Python and a package in another
    return False


@lru_cache(maxsize=1 << 14)
def _frame_kinds(file: str | None, func: str) -> frozenset[str]:
    """Return the categories whose signature tables a Python frame of ``file``/``func`` is in.

    Thousands of ranks show the same few dozen frames: each (file, function) is matched
    against the tables once, not once per frame, table and process.
    """
    path = module_path(file)
    return frozenset(kind for kind, rules in _TABLES if _matches_at(path, func, rules))


def _collective(frames: Sequence[Frame]) -> str | None:
    """Return the torch.distributed call the innermost collective frame makes."""
    for frame in frames:
        if frame.native:
            continue
        path, name = module_path(frame.file), short_name(frame.func)
        if path == _C10D and name in _C10D_OPS:
            return _OP_ALIASES.get(name, name)
        for prefix, ops in _WRAPPERS:
            if (path == prefix or (prefix.endswith("/") and path.startswith(prefix))) and (
                name in ops
            ):
                return ops[name]
    # Only with --native: a Work::wait() called from Python (isend/irecv, async_op=True).
    for frame in frames:
        if frame.native and _NATIVE_WORK_WAIT.match(frame.func):
            return "wait"
    return None


def _category(frames: Sequence[Frame]) -> tuple[str, str | None]:
    """Return (category, collective) by the precedence documented on :func:`classify_thread`."""
    collective = _collective(frames)
    natives = [f.func for f in frames if f.native]
    kinds: set[str] = set()
    for frame in frames:
        if not frame.native:
            kinds |= _frame_kinds(frame.file, frame.func)
    if "init" in kinds or any(_NATIVE_INIT.search(n) for n in natives):
        return "init", collective
    if collective is not None:
        return "collective", collective
    if "data-loading" in kinds:
        return "data-loading", None
    if "lock" in kinds or _NATIVE_LOCK.intersection(natives):
        return "lock", None
    if "io" in kinds:
        return "io", None
    if "compute" in kinds or any(_NATIVE_COMPUTE.search(n) for n in natives):
        return "compute", None
    if "sleep" in kinds or _NATIVE_SLEEP.intersection(natives):
        return "sleep", None
    return "unknown", None


def _call_site(frames: Sequence[Frame], category: str) -> Frame | None:
    owners = _FRAMEWORKS if category in ("lock", "io", "sleep") else frozenset()
    for frame in frames:
        library = _library(frame)
        if library is None or library in owners:
            return frame
    return None


def _label(frame: Frame | None) -> str | None:
    return None if frame is None else frame_label(frame)


def classify_thread(thread: ThreadStack) -> tuple[str, str | None, str | None]:
    """Say where ``thread`` waits: (category, collective, call site).

    The category is the first of these that any frame shows, in this order: ``init``
    (process-group creation, rendezvous, a store barrier; the collective is kept when one is
    on the stack), ``collective`` (a torch.distributed call, or a DeepSpeed / Megatron / FSDP
    wrapper of one), ``data-loading`` (``torch.utils.data``: the DataLoader iterator and its
    worker and pin-memory queues), ``lock`` (threading waits, ``FileBaton``, ``filelock``),
    ``io`` (checkpoint save/load, sockets, selectors, subprocesses), ``compute`` (CUDA
    synchronize, autograd, a module forward, the optimizer), ``sleep`` (seen only in
    ``--native`` dumps). A thread without frames is ``idle``; anything else ``unknown``.
    Outer categories win over inner frames on purpose: a DataLoader waits in a selector and
    a collective in a condition variable, and the outer frame says why.

    The call site is the innermost frame of user code (outside torch, the standard library
    and the frameworks in ``_LIBRARIES``), printed ``func (file:line)``. For ``lock``, ``io``
    and ``sleep`` a framework frame also counts: the framework that took the lock or opened
    the file (``jit_load`` building a DeepSpeed op) says more than the user line above it.
    """
    frames = thread.frames
    if not frames:
        return "idle", None, None
    category, collective = _category(frames)
    return category, collective, _label(_call_site(frames, category))


def classify_dump(dump: StackDump) -> tuple[str, str | None, str | None]:
    """Say where a process waits: :func:`classify_thread` of its main thread, except that a
    main thread in compute, a lock, I/O, sleep or nothing known defers to another thread
    waiting in a collective (the autograd thread runs DDP and ZeRO hooks; the main thread
    just sits in ``backward``). The call site stays the main thread's.
    """
    main = dump.main_thread()
    if main is None:
        return "idle", None, None
    category, collective, call_site = classify_thread(main)
    if category in ("collective", "init", "data-loading"):
        return category, collective, call_site
    for thread in dump.threads:
        if thread is not main and thread.frames:
            other, op = _category(thread.frames)
            if other == "collective":
                return other, op, call_site
    return category, collective, call_site


def collective_call_site(frames: Sequence[Frame]) -> Frame | None:
    """Return the call site of a collective's stack (innermost first): its innermost frame of
    user code."""
    return _call_site(frames, "collective")


def call_site_frame(dump: StackDump) -> Frame | None:
    """Return the frame :func:`classify_dump` names as the call site of ``dump``."""
    main = dump.main_thread()
    if main is None or not main.frames:
        return None
    return _call_site(main.frames, _category(main.frames)[0])


def process_role(dump: StackDump) -> str:
    """Say what kind of process a dump is of, from its main thread's frames.

    ``--subprocesses`` dumps include more than the ranks: ``dataloader-worker`` (a
    ``torch.utils.data`` worker, which carries its rank's pre-fork frames below its own),
    ``launcher`` (the torchrun / elastic agent), ``helper`` (multiprocessing's resource
    tracker or forkserver); everything else is ``rank``.
    """
    main = dump.main_thread()
    paths = {module_path(f.file) for f in (main.frames if main else ()) if not f.native}
    if any(p.startswith("torch/utils/data/_utils/worker.py") for p in paths):
        return "dataloader-worker"
    if any(p.startswith("torch/distributed/elastic/agent/") for p in paths) or (
        "torch/distributed/run.py" in paths
    ):
        return "launcher"
    if paths & {"multiprocessing/resource_tracker.py", "multiprocessing/forkserver.py"}:
        return "helper"
    return "rank"
