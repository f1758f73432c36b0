"""Run the per-input map (read and parse one file) on a Dask distributed cluster.

``--scheduler tcp://HOST:8786`` (or ``tls://``) connects to a running scheduler whose
workers can import logsleuth and reach the inputs (a shared filesystem or object-storage
URLs); ``--scheduler local:N`` starts a local cluster of N worker processes. The map is the
same function the local process pool runs, so the results, and the diagnosis, are the same.
Dask is part of the optional ``[cluster]`` extra.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any, TypeVar

from logsleuth.errors import UsageError
from logsleuth.parse.remote import EXTRA_HINT

T = TypeVar("T")
R = TypeVar("R")

_LOCAL = re.compile(r"^local(?::(\d+))?$")
_REMOTE = re.compile(r"^(?:tcp|tls|ucx|inproc)://\S+$")
CONNECT_TIMEOUT_S = 10


def check_scheduler(spec: str) -> str:
    """Return ``spec`` when it names a scheduler (``local[:N]`` or ``tcp://HOST:PORT``).

    ``local`` alone starts one worker process per core.

    Raises:
        UsageError: it names neither.
    """
    if _LOCAL.match(spec) or _REMOTE.match(spec):
        return spec
    raise UsageError(f"--scheduler {spec}: expected tcp://HOST:PORT or local:N")


def _batches(items: Sequence[T], workers: int) -> list[list[T]]:
    """Cut ``items`` into batches: many small inputs cost one hand-over per batch."""
    size = max(1, min(64, len(items) // max(1, workers * 16)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def worker_version() -> str:
    """What a worker reads with: the logsleuth release (its results must match this one's)."""
    from logsleuth import __version__

    return __version__


def check_workers(versions: dict[str, str], mine: str) -> None:
    """Refuse a cluster whose workers run another logsleuth release than this process.

    A worker of another release would send events of other shapes (or none it could
    unpickle here): the diagnosis would be wrong or the run would fail half-way.

    Raises:
        UsageError: naming the first differing worker and both releases.
    """
    odd = sorted((address, version) for address, version in versions.items() if version != mine)
    if odd:
        address, version = odd[0]
        raise UsageError(
            f"--scheduler: {len(odd)} of {len(versions)} Dask worker(s) run logsleuth {version} "
            f"(first: {address}), this is {mine}: install the same release on the workers"
        )


def _apply(fn: Callable[[T], R], batch: list[T]) -> list[R]:
    return [fn(item) for item in batch]


def dask_map(
    spec: str,
    fn: Callable[[T], R],
    items: Sequence[T],
    done: Callable[[list[T]], None] | None = None,
) -> Iterator[R]:
    """Yield ``fn(item)`` for each item, in order, computed on the Dask cluster ``spec``.

    Args:
        spec: ``local:N`` or a scheduler address (see :func:`check_scheduler`).
        fn: A picklable top-level function.
        items: Its arguments (picklable).
        done: Called with the items of each batch as it finishes (in any order).

    Raises:
        UsageError: Dask is not installed, or the scheduler cannot be reached or started.
    """
    check_scheduler(spec)
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise UsageError(f"--scheduler needs the [cluster] extra ({EXTRA_HINT})") from exc
    with ExitStack() as stack:
        client: Any
        local = _LOCAL.match(spec)
        try:
            if local is not None:
                workers = int(local.group(1) or os.cpu_count() or 1)
                cluster = stack.enter_context(
                    LocalCluster(
                        n_workers=max(1, workers),
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=logging.ERROR,
                    )
                )
                client = stack.enter_context(Client(cluster))
            else:
                client = stack.enter_context(
                    Client(spec, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
                )
        except (OSError, TimeoutError) as exc:
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise UsageError(
                f"--scheduler {spec}: cannot reach the Dask scheduler: {reason}"
            ) from exc
        check_workers(client.run(worker_version), worker_version())
        nworkers = max(1, len(client.scheduler_info().get("workers", {})))
        batches = _batches(items, nworkers)
        futures = client.map(_apply, [fn] * len(batches), batches, pure=False)
        position = {future.key: i for i, future in enumerate(futures)}
        finished: dict[int, list[R]] = {}
        next_out = 0
        for future in as_completed(futures):
            index = position[future.key]
            finished[index] = future.result()
            future.release()
            if done is not None:
                done(batches[index])
            while next_out in finished:
                yield from finished.pop(next_out)
                next_out += 1
