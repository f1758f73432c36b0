"""A bounded fuzz run (issue 19): mutated corpus lines and dumps, analysed under 1 GB.

No mutation may end in exit status 3, and every input's lines stay accounted for. The
examples are derandomized, so CI sees the same ones every run; the budget keeps it to
seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 300


def test_mutated_corpus_and_dumps_never_crash_under_a_memory_limit() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.hostile.fuzz_child", str(EXAMPLES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
