"""Hostile and broken inputs (issue 19): each case is made here, small, beside a good log.

Every case runs ``logsleuth analyze`` in a child process limited to 1 GB of address space
(``harness.MEMORY_LIMIT``) and a minute: it must end with exit status 0-2, say what is
wrong with the hostile input in one line (when something is), show no traceback, and still
analyse the good log beside it.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct
from pathlib import Path

import pytest

from tests.hostile.harness import GOOD_LOG, Outcome, run_analyze


def _good(directory: Path) -> Path:
    path = directory / "good.log"
    path.write_text(GOOD_LOG)
    return path


def _diagnosis(outcome: Outcome) -> dict[str, object]:
    data = json.loads(outcome.stdout)
    assert isinstance(data, dict)
    return data


def _inputs(outcome: Outcome) -> dict[str, dict[str, object]]:
    inputs = _diagnosis(outcome)["inputs"]
    assert isinstance(inputs, list)
    return {str(i["source"]): i for i in inputs}


def _check(outcome: Outcome, *, warns: str | None = None, good: str = "good.log") -> None:
    """The common acceptance of every case."""
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.code in (0, 1), (outcome.code, outcome.stderr)
    inputs = _inputs(outcome)
    assert inputs[good]["recognized"] == 5, inputs
    for info in inputs.values():
        assert info["recognized"] + info["unrecognized"] + info["blank"] == info["lines"]
    if warns is not None:
        warnings = [line for line in outcome.error_lines() if warns in line]
        assert len(warnings) == 1, outcome.stderr


def _analyze(directory: Path, *paths: str, patch: str = "", **kwargs: object) -> Outcome:
    return run_analyze(["analyze", *paths, "--json", "-"], cwd=directory, patch=patch, **kwargs)  # type: ignore[arg-type]


def test_claimed_world_of_four_billion_ranks(tmp_path: Path) -> None:
    _good(tmp_path)
    (tmp_path / "huge.log").write_text(
        "node1:7:7 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 3 nranks 4294967296 cudaDev 0 "
        "nvmlDev 0 busId 1000 commId 0x2 - Init START\n"
    )
    _check(_analyze(tmp_path, "huge.log", "good.log"))


def test_launcher_prefix_with_a_rank_of_four_billion(tmp_path: Path) -> None:
    _good(tmp_path)
    (tmp_path / "prefix.log").write_text(
        "[1,4294967296]<stdout>:node1:7:7 [0] NCCL INFO Using network IB\n"
        "[1,0]<stdout>:node1:8:8 [0] NCCL INFO Using network IB\n"
    )
    _check(_analyze(tmp_path, "prefix.log", "good.log"))


def _fr_pickle(entries: bytes) -> bytes:
    """A protocol-2 pickle of {"version": "2.4", "pg_config": {}, "entries": <entries>}."""

    def text(value: str) -> bytes:
        raw = value.encode()
        return b"X" + struct.pack("<I", len(raw)) + raw

    return (
        b"\x80\x02}("
        + text("version")
        + text("2.4")
        + text("pg_config")
        + b"}"
        + text("entries")
        + entries
        + b"u."
    )


def test_flight_recorder_pickle_with_shared_references(tmp_path: Path) -> None:
    # billion laughs: each level is a list of 10 references to the level below (10**9 leaves).
    laugh = [{"profiling_name": "nccl:all_reduce", "frames": [{"name": "lol"}]}]
    for _ in range(9):
        laugh = [laugh] * 10  # type: ignore[list-item]
    data = pickle.dumps({"version": "2.4", "pg_config": {}, "entries": laugh}, protocol=2)
    assert len(data) < 4096
    (tmp_path / "rank1.pkl").write_bytes(data)
    _good(tmp_path)
    outcome = _analyze(tmp_path, ".")
    _check(outcome, warns="rank1.pkl: flight-recorder pickle over budget")


def test_deeply_nested_pickle(tmp_path: Path) -> None:
    depth = 200_000
    (tmp_path / "rank2.pkl").write_bytes(_fr_pickle(b"]" * depth + b"a" * (depth - 1)))
    _good(tmp_path)
    _check(_analyze(tmp_path, "."), warns="rank2.pkl: flight-recorder pickle over budget")


def test_deeply_nested_json(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep2.json").write_text(
        '[{"thread_id": 1, "frames": [], "owns_gil": false, "x": ' + "[" * 500 + "]" * 500 + "}]"
    )
    _good(tmp_path)
    outcome = _analyze(tmp_path, ".")
    _check(outcome, warns="deep.json: JSON nested")
    _check(outcome, warns="deep2.json: JSON document over budget: nested more than")


def test_json_larger_than_its_budget(tmp_path: Path) -> None:
    threads = [
        {"thread_id": i, "frames": [{"name": "f", "filename": "a.py", "line": 1}], "owns_gil": 0}
        for i in range(4000)
    ]
    (tmp_path / "pyspy.json").write_text(json.dumps(threads))
    _good(tmp_path)
    patch = "import logsleuth.parse.budgets as b; b.JSON_BYTES = 64 << 10"
    outcome = _analyze(tmp_path, ".", patch=patch)
    _check(outcome, warns="pyspy.json: JSON document larger than 0 MiB")


def test_json_with_too_many_values(tmp_path: Path) -> None:
    (tmp_path / "many.json").write_text(
        '[{"thread_id": 1, "frames": [], "owns_gil": false, "x": [' + "[]," * 50_000 + "[]]}]"
    )
    _good(tmp_path)
    patch = "import logsleuth.parse.budgets as b; b.JSON_VALUES = 10_000"
    _check(_analyze(tmp_path, ".", patch=patch), warns="many.json: JSON document over budget")


def test_gzip_bomb_stops_at_its_budget(tmp_path: Path) -> None:
    # 64 MB of log lines (a JSON-looking start) in a ~100 KB .gz, read with a 1 MB budget.
    line = b"[rank0]: waiting for the others\n"
    with gzip.open(tmp_path / "bomb.log.gz", "wb", compresslevel=9) as out:
        block = line * 32_768
        for _ in range(64):
            out.write(block)
    assert (tmp_path / "bomb.log.gz").stat().st_size < 1 << 20
    _good(tmp_path)
    patch = "import logsleuth.parse.budgets as b; b.GZIP_BYTES = 1 << 20"
    outcome = _analyze(tmp_path, ".", patch=patch)
    _check(outcome, warns="bomb.log.gz: stopped after 1 MiB decompressed")
    assert _inputs(outcome)["bomb.log.gz"]["lines"] <= (1 << 20) // len(line) + 1


def test_opcount_of_3600_hex_digits(tmp_path: Path) -> None:
    (tmp_path / "wide.log").write_text(
        GOOD_LOG.replace("opCount 4 ", "opCount " + "f" * 3600 + " ")
    )
    _good(tmp_path)
    outcome = _analyze(tmp_path, ".")
    _check(outcome)


def test_pyspy_json_whose_locals_is_not_a_list(tmp_path: Path) -> None:
    frame = {"name": "train", "filename": "train.py", "short_filename": "train.py", "line": 3}
    thread = {"thread_id": 1, "os_thread_id": 7, "pid": 7, "thread_name": "MainThread"}
    (tmp_path / "pyspy.json").write_text(
        json.dumps(
            [{**thread, "active": True, "owns_gil": False, "frames": [{**frame, "locals": 5}]}]
        )
    )
    _good(tmp_path)
    outcome = _analyze(tmp_path, ".")
    _check(outcome)
    assert _inputs(outcome)["pyspy.json"]["kind"] == "py-spy-json"


def test_directory_without_search_permission(tmp_path: Path) -> None:
    # Root may enter any directory; the child runs without the capabilities that allow it.
    top = tmp_path / "in"
    (top / "locked").mkdir(parents=True)
    (top / "locked" / "rank9.log").write_text(GOOD_LOG)
    (top / "noread").mkdir()
    (top / "noread" / "rank8.log").write_text(GOOD_LOG)
    _good(top)
    (top / "locked").chmod(0o600)  # listable names, no search
    (top / "noread").chmod(0o000)
    try:
        outcome = _analyze(top, ".", "locked", without_dac=True)
    finally:
        (top / "locked").chmod(0o700)
        (top / "noread").chmod(0o700)
    _check(outcome, warns="noread: cannot list directory: permission denied")
    assert "locked" in outcome.stderr


def test_990_nested_directories(tmp_path: Path) -> None:
    top = tmp_path / "in"
    deep = top
    top.mkdir()
    for _ in range(990):  # one level at a time: pathlib's mkdir(parents=True) recurses
        deep = deep / "d"
        deep.mkdir()
    (deep / "deep.log").write_text(GOOD_LOG)
    _good(top)
    try:
        _check(_analyze(top, "."), warns="nested more than 64 directories deep")
    finally:  # bottom up: pytest's own clean-up recurses once per level
        (deep / "deep.log").unlink()
        while deep != top:
            deep.rmdir()
            deep = deep.parent


def test_non_utf8_file_name_with_html(tmp_path: Path) -> None:
    name = os.fsdecode(b"rank\xff\x1b[31m.log")
    (tmp_path / name).write_text(GOOD_LOG)
    _good(tmp_path)
    outcome = _analyze(tmp_path, ".", "--html", "report.html")
    _check(outcome)
    report = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "rank\\xff\\x1b[31m.log" in report
    assert not list(tmp_path.glob(".*.partial"))


def test_process_substitution_streams_every_byte(tmp_path: Path) -> None:
    big = GOOD_LOG * 400  # 2,000 lines, far past the first 4 KB
    (tmp_path / "big.log").write_text(big)
    _good(tmp_path)
    outcome = run_analyze(
        [],
        cwd=tmp_path,
        shell="$LOGSLEUTH analyze <(cat big.log) good.log --json - && cat big.log | "
        "$LOGSLEUTH analyze - --quiet",
    )
    assert outcome.code in (0, 1), outcome.stderr
    first = json.loads(outcome.stdout[: outcome.stdout.rindex("}") + 1])
    piped = [i for i in first["inputs"] if i["source"] != "good.log"]
    assert [i["lines"] for i in piped] == [2000]
    assert piped[0]["recognized"] == 2000


def test_fifo_without_a_writer_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    _good(tmp_path)
    patch = "import logsleuth.parse.budgets as b; b.PIPE_WAIT_S = 1.0"
    outcome = _analyze(tmp_path, "fifo", "good.log", patch=patch)
    _check(outcome, warns="fifo: FIFO or pipe with no writer")
    assert outcome.seconds < 30


def test_terminal_escape_sequences_are_neutralized(tmp_path: Path) -> None:
    evil = "\x1b]0;owned\x07\x1b[2J\x9b1m"
    (tmp_path / f"evil{evil}.log").write_text(
        GOOD_LOG + f"node1:100:100 [0] NCCL WARN {evil} failure\n"
    )
    (tmp_path / "empty.log").write_text("")
    for args in (
        ["analyze", ".", "--quiet"],
        ["analyze", "."],
        ["coverage", "."],
        ["analyze", f"missing{evil}"],
    ):
        outcome = run_analyze(args, cwd=tmp_path)
        assert outcome.code <= 2, outcome.stderr
        for text in (outcome.stdout, outcome.stderr):
            assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, args


def test_many_small_files_take_linear_time(tmp_path: Path) -> None:
    def run(count: int) -> float:
        top = tmp_path / str(count)
        for i in range(count):
            sub = top / f"host{i // 100:03d}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"rank{i}.log").write_text(GOOD_LOG.replace("node1:100:100", f"n:{i}:{i}"))
        outcome = run_analyze(["analyze", str(top), "--quiet"])
        assert outcome.code in (0, 1), outcome.stderr
        return outcome.seconds

    small, large = run(300), run(1200)
    # 4x the files: linear is 4x (plus the fixed start-up cost); quadratic would be 16x.
    assert large < 8 * small + 2, (small, large)


def test_a_long_line_takes_linear_time(tmp_path: Path) -> None:
    _good(tmp_path)

    def run(size: int) -> float:
        path = tmp_path / f"line{size}.log"
        path.write_text(GOOD_LOG + "x" * size + "\n" + GOOD_LOG)
        outcome = _analyze(tmp_path, path.name, "good.log")
        _check(outcome, warns=f"{path.name}: a line longer than")
        assert _inputs(outcome)[path.name]["lines"] == 11
        return outcome.seconds

    small, large = run(8 << 20), run(32 << 20)
    assert large < 8 * small + 2, (small, large)


def test_truncated_and_crc_damaged_gzip_yield_what_decompressed(tmp_path: Path) -> None:
    data = gzip.compress((GOOD_LOG * 400).encode())
    (tmp_path / "cut.log.gz").write_bytes(data[: len(data) // 2])
    damaged = bytearray(data)
    damaged[-8] ^= 0xFF  # the CRC32 of the trailer
    (tmp_path / "crc.log.gz").write_bytes(bytes(damaged))
    _good(tmp_path)
    outcome = _analyze(tmp_path, ".")
    _check(outcome, warns="cut.log.gz: damaged data after")
    _check(outcome, warns="crc.log.gz: damaged data after")
    inputs = _inputs(outcome)
    assert 0 < inputs["cut.log.gz"]["recognized"] < 2000
    assert inputs["crc.log.gz"]["recognized"] == 2000
    assert "damaged data" in str(inputs["cut.log.gz"]["error"])


def test_leading_nul_block_and_cr_only_line_endings(tmp_path: Path) -> None:
    (tmp_path / "nul.log").write_bytes(b"\0" * 65536 + b"\n" + GOOD_LOG.encode())
    (tmp_path / "cr.log").write_bytes(GOOD_LOG.replace("\n", "\r").encode())
    _good(tmp_path)
    outcome = _analyze(tmp_path, ".")
    _check(outcome)
    inputs = _inputs(outcome)
    assert inputs["nul.log"]["recognized"] == 5
    assert inputs["cr.log"]["recognized"] == 5


def test_json_output_may_not_overwrite_an_input(tmp_path: Path) -> None:
    good = _good(tmp_path)
    for output in (["--json", "good.log"], ["--html", "./good.log"]):
        outcome = run_analyze(["analyze", ".", *output], cwd=tmp_path)
        assert outcome.code == 2
        assert outcome.error_lines() == [
            f"logsleuth: error: {output[1]}: is one of the inputs; refusing to overwrite it"
        ]
        assert good.read_text() == GOOD_LOG


def test_symlink_loop_is_reported_as_such(tmp_path: Path) -> None:
    (tmp_path / "a.log").symlink_to("b.log")
    (tmp_path / "b.log").symlink_to("a.log")
    _good(tmp_path)
    outcome = _analyze(tmp_path, "a.log", "good.log")
    _check(outcome, warns="a.log: symbolic link loop")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.log").symlink_to("c.log")
    (tmp_path / "sub" / "gone.log").symlink_to("nowhere.log")
    outcome = _analyze(tmp_path, "sub", "good.log")
    _check(outcome, warns="sub/c.log: symbolic link loop")
    _check(outcome, warns="sub/gone.log: broken symbolic link")


def test_missing_live_command_leaves_no_out_directory(tmp_path: Path) -> None:
    outcome = run_analyze(
        ["live", "--out", "bundle", "--", "/nonexistent/command", "x"], cwd=tmp_path
    )
    assert outcome.code == 2
    assert outcome.error_lines() == [
        "logsleuth: error: /nonexistent/command: cannot run: No such file or directory"
    ]
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize("name", ["empty.log", "binary.bin"])
def test_nothing_usable_is_exit_2_in_one_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"" if name == "empty.log" else bytes(range(256)) * 16)
    outcome = run_analyze(["analyze", name], cwd=tmp_path)
    assert outcome.code == 2
    assert len(outcome.stderr.splitlines()) == 1, outcome.stderr


def test_an_exception_reading_one_input_is_contained(tmp_path: Path) -> None:
    # A parser bug, simulated: reading py-spy JSON raises. That input becomes an input
    # error (one line; the traceback only with --debug) and the good log is analysed.
    (tmp_path / "pyspy.json").write_text('[{"thread_id": 1, "frames": [], "owns_gil": false}]')
    _good(tmp_path)
    patch = (
        "import logsleuth.parse.dispatch as d\n"
        "def boom(*args): raise ZeroDivisionError('simulated parser bug')\n"
        "d.parse_pyspy_json = boom"
    )
    outcome = _analyze(tmp_path, ".", patch=patch)
    _check(outcome, warns="pyspy.json: could not be read: ZeroDivisionError: simulated")
    assert _inputs(outcome)["pyspy.json"]["kind"] == "unreadable"
    debug = run_analyze(["--debug", "analyze", ".", "--json", "-"], cwd=tmp_path, patch=patch)
    assert debug.code in (0, 1)
    assert "Traceback (most recent call last)" in debug.stderr
    assert "ZeroDivisionError: simulated parser bug" in debug.stderr
