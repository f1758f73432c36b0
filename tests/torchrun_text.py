"""torchrun's failure summary (the ``ChildFailedError`` report), as tests write it into a log."""

from __future__ import annotations

NO_OTHER_FAILURES = "  <NO_OTHER_FAILURES>"
TRACEBACK_HINT = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def failure_entry(
    index: int,
    *,
    time: str,
    host: str,
    rank: int,
    local_rank: int,
    exitcode: int,
    pid: int,
    error_file: str = "<N/A>",
    traceback: str = TRACEBACK_HINT,
) -> str:
    """One worker's entry (``[0]:`` and its fields), without a line end after it."""
    return (
        f"[{index}]:\n"
        f"  time      : {time}\n"
        f"  host      : {host}\n"
        f"  rank      : {rank} (local_rank: {local_rank})\n"
        f"  exitcode  : {exitcode} (pid: {pid})\n"
        f"  error_file: {error_file}\n"
        f"  traceback : {traceback}"
    )


def failure_summary(root: str, others: str = NO_OTHER_FAILURES) -> str:
    """The whole report of ``train.py``: the other failures, then the root cause's entry."""
    rule, thin = "=" * 60, "-" * 60
    return (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        f"{rule}\ntrain.py FAILED\n{thin}\nFailures:\n{others}\n{thin}\n"
        f"Root Cause (first observed failure):\n{root}\n{rule}\n"
    )
