"""LS122 init.duplicate_ranks, LS123 init.store_barrier and LS128 init.roll_call: set-up that
waits for ranks."""

from __future__ import annotations

from pathlib import Path

from logsleuth.api import analyze


def _codes(tmp_path: Path, text: str) -> list[tuple[str, str, tuple[int, ...]]]:
    log = tmp_path / "stdout.log"
    log.write_text(text, encoding="utf-8")
    d = analyze([str(log)]).diagnosis
    return [(f.code, f.kind, f.ranks) for f in d.findings if f.code in ("LS122", "LS123", "LS128")]


def test_ranks_started_twice_while_others_never_start(tmp_path: Path) -> None:
    lines = [f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in range(4)]
    assert _codes(tmp_path, "".join(lines * 2)) == [("LS122", "init-stall", ())]


def test_every_rank_once_is_no_duplicate(tmp_path: Path) -> None:
    lines = [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in range(4)]
    assert _codes(tmp_path, "".join(lines)) == []


def _roll_call(ranks: list[int], world: int) -> str:
    return "".join(
        f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{world}\n" for r in ranks
    )


def test_a_rank_missing_from_the_roll_call_is_what_set_up_waits_for(tmp_path: Path) -> None:
    assert _codes(tmp_path, _roll_call([0, 2, 1], 4)) == [("LS128", "init-stall", (3,))]
    verdict = analyze([str(tmp_path / "stdout.log")]).diagnosis.verdict
    assert (verdict.kind, verdict.culprit_ranks) == ("init-stall", (3,))


def test_a_roll_call_that_set_up_completed_or_that_misses_most_names_no_one(
    tmp_path: Path,
) -> None:
    done = "All distributed processes registered. Starting with 4 processes\n"
    assert _codes(tmp_path, _roll_call([0, 2, 1], 4) + done) == []
    # Most of the world missing: the excerpt is cut, not the ranks.
    assert _codes(tmp_path, _roll_call([0, 1], 8)) == []
    # A rank that wrote any other line was started.
    spoke = "[rank3]: Traceback (most recent call last):\n"
    assert _codes(tmp_path, _roll_call([0, 2, 1], 4) + spoke) == []


WAITING = (
    "I0510 07:28:04.417845 139863945226048 distributed_c10d.py:337] Waiting in store based "
    "barrier to initialize process group for rank: {r}, key: store_based_barrier_key:2 "
    "(world_size={w}, worker_count={k}, timeout=0:30:00)\n"
)


def test_ranks_waiting_in_the_store_barrier_for_ranks_that_never_come(tmp_path: Path) -> None:
    text = WAITING.format(r=2, w=8, k=7) + WAITING.format(r=7, w=8, k=7)
    assert _codes(tmp_path, text) == [("LS123", "init-stall", ())]


def test_when_every_joined_rank_is_seen_the_missing_one_is_named(tmp_path: Path) -> None:
    text = "".join(WAITING.format(r=r, w=4, k=3) for r in (0, 1, 3))
    assert _codes(tmp_path, text) == [("LS123", "init-stall", (2,))]


def test_the_barriers_own_arrivals_name_the_rank_that_never_came(tmp_path: Path) -> None:
    # c10d's "Added key ... for rank: N" lists who arrived; two ranks print the wait.
    added = "INFO:torch.distributed.distributed_c10d:Added key: store_based_barrier_key:2 to store for rank: {r}\n"
    text = "".join(added.format(r=r) for r in (0, 2, 1, 5, 3, 4)) + WAITING.format(r=0, w=8, k=7)
    text += added.format(r=7) + WAITING.format(r=4, w=8, k=7)
    assert _codes(tmp_path, text) == [("LS123", "init-stall", (6,))]


def test_a_full_barrier_is_no_stall(tmp_path: Path) -> None:
    assert _codes(tmp_path, WAITING.format(r=0, w=4, k=4)) == []
