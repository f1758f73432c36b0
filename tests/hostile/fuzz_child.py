"""Run inside a child process limited to 1 GB (see test_fuzz.py): analyse mutated corpus
lines and dumps with a fixed hypothesis budget; exit non-zero on the first failure.

Usage: ``python -m tests.hostile.fuzz_child EXAMPLES``.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.harness import MEMORY_LIMIT

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
TEXTS = sorted(
    p
    for p in [*CORPUS.glob("*/*"), *(ROOT / "fixtures" / "real" / "corpus").glob("*/*")]
    if p.is_file() and not p.name.startswith("truth.")
)
DUMPS = sorted(
    p
    for p in [
        *(ROOT / "fixtures" / "real" / "fr").glob("*/rank_*"),
        *(ROOT / "fixtures").rglob("*.json"),
    ]
    if p.is_file() and p.name not in ("truth.json", "diagnosis.json")
)
HOSTILE = [
    b"\x00" * 64,
    b"\x1b]0;x\x07",
    b"4294967296",
    b"f" * 3600,
    b"[1,4294967296]<stdout>:",
    b"\r",
    b"\xff\xfe",
    b"[" * 200,
    b"nranks 99999999999999999999",
    b"\n",
]

mutation = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.sampled_from(HOSTILE)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(max_size=40)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 20), st.just(b"")),
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=1)),
    st.tuples(
        st.just("digits"), st.integers(0, 1 << 20), st.sampled_from([b"9" * 30, b"-1", b"0"])
    ),
)


def _mutate(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    for kind, where, text in edits:
        at = where % (len(data) + 1)
        if kind == "insert":
            data = data[:at] + text + data[at:]
        elif kind == "cut":
            data = data[:at]
        elif kind == "flip" and data:
            at = min(at, len(data) - 1)
            data = data[:at] + bytes([data[at] ^ text[0]]) + data[at + 1 :]
        elif kind == "digits":
            digit = next((i for i in range(at, len(data)) if chr(data[i]).isdigit()), None)
            if digit is not None:
                data = data[:digit] + text + data[digit + 1 :]
    return data


def _analyze(files: dict[str, bytes]) -> None:
    from logsleuth.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
        out = Path(tmp) / "out.json"
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["analyze", *(str(Path(tmp) / n) for n in files), "--json", str(out)])
        assert code != 3, (code, err.getvalue())
        assert code in (0, 1, 2), code
        for line in err.getvalue().splitlines():
            assert "\x1b" not in line
        if code == 2:
            return
        for item in json.loads(out.read_text())["inputs"]:
            assert item["recognized"] + item["unrecognized"] + item["blank"] == item["lines"], item


def run(examples: int) -> None:
    """Fuzz with a fixed budget and a derandomized (CI-stable) sequence of examples."""

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        text=st.sampled_from(TEXTS),
        dump=st.sampled_from(DUMPS),
        text_edits=st.lists(mutation, max_size=4),
        dump_edits=st.lists(mutation, max_size=3),
    )
    def check(
        text: Path,
        dump: Path,
        text_edits: list[tuple[str, int, bytes]],
        dump_edits: list[tuple[str, int, bytes]],
    ) -> None:
        _analyze(
            {
                "a.log": _mutate(text.read_bytes(), text_edits),
                dump.name if dump.suffix else "rank_0": _mutate(dump.read_bytes(), dump_edits),
            }
        )

    check()


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    run(int(sys.argv[1]))
