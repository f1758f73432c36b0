"""Built-in fault scenarios: small torch.distributed jobs that hang or fail in a known way.

``logsleuth repro list`` shows them and ``logsleuth repro run NAME`` runs one under
``python -m torch.distributed.run`` (or under ``logsleuth live`` with ``--live``). The
scenario scripts import torch; this module does not, so listing works without it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from logsleuth.errors import UsageError

CULPRIT_ENV = "LOGSLEUTH_REPRO_CULPRIT"
"""Which rank misbehaves (default 1)."""
BACKEND_ENV = "LOGSLEUTH_BACKEND"
"""``gloo`` or ``nccl``; unset means NCCL when CUDA is available, else gloo."""
TIMEOUT_ENV = "LOGSLEUTH_REPRO_TIMEOUT"
"""Process-group timeout in seconds, so that a hang run without ``live`` still ends."""

_SCENARIO_DIR = Path(__file__).parent / "scenarios"


@dataclass(frozen=True, slots=True)
class Scenario:
    """One fault scenario: its name, what goes wrong, and what logsleuth should say."""

    name: str
    description: str
    expected_kind: str
    """The verdict kind a correct diagnosis gives (``healthy`` for the healthy run)."""
    hangs: bool
    """True when the job hangs (live mode must detect the stall), False when it ends."""

    @property
    def script(self) -> Path:
        """Return the path of the scenario's script inside the installed package."""
        return _SCENARIO_DIR / f"{self.name.replace('-', '_')}.py"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy", "every rank runs the same all_reduce steps and exits 0", "healthy", False),
    Scenario(
        "skip-collective",
        "the culprit skips the last step's all_reduce and waits in the final barrier",
        "missing-collective",
        True,
    ),
    Scenario(
        "order-mismatch",
        "the culprit issues broadcast then all_reduce where the others issue all_reduce then broadcast",
        "collective-mismatch",
        True,
    ),
    Scenario(
        "size-mismatch",
        "the culprit all_reduces a tensor twice as large as the others' at one step",
        "collective-mismatch",
        True,
    ),
    Scenario(
        "exception",
        "the culprit raises RuntimeError in the middle of the loop",
        "process-died",
        False,
    ),
    Scenario(
        "early-exit",
        "the culprit leaves its loop early and exits 0 without a word",
        "missing-collective",
        False,
    ),
    Scenario(
        "dataloader-stall",
        "the culprit's DataLoader worker sleeps forever fetching one batch",
        "non-collective-stall",
        True,
    ),
    Scenario(
        "init-never",
        "the culprit never calls init_process_group (it sleeps in its set-up)",
        "init-stall",
        True,
    ),
    Scenario(
        "skip-last-collective",
        "the culprit leaves out the final barrier and exits 0; the others lose their peer",
        "missing-collective",
        False,
    ),
    Scenario(
        "subgroup-barrier-skip",
        "the culprit skips one barrier of its new_group pair and goes on to the all_reduce",
        "missing-collective",
        True,
    ),
    Scenario(
        "size-mismatch-detail",
        "the culprit all_reduces twice as many elements, under TORCH_DISTRIBUTED_DEBUG=DETAIL",
        "collective-mismatch",
        False,
    ),
    Scenario(
        "eval-stall",
        "the culprit runs a long evaluation while the others wait in the next all_reduce",
        "non-collective-stall",
        True,
    ),
    Scenario(
        "init-barrier-slow",
        "the culprit's set-up outlasts the store-based barrier of init_process_group",
        "init-stall",
        False,
    ),
    Scenario(
        "pipeline-wrong-peer",
        "a pipeline stage posts its recv from the next stage instead of the previous one",
        "collective-mismatch",
        True,
    ),
    Scenario(
        "pipeline-drop-send",
        "a pipeline stage drops its last send and waits in the final barrier",
        "missing-collective",
        True,
    ),
    Scenario(
        "ring-skip-hop",
        "a rank of a send/recv ring sends two ranks on, skipping its neighbour",
        "collective-mismatch",
        True,
    ),
)


def find_scenario(name: str) -> Scenario:
    """Return the scenario called ``name``.

    Raises:
        UsageError: no scenario has that name; the message lists the known ones.
    """
    for each in SCENARIOS:
        if each.name == name:
            return each
    known = ", ".join(s.name for s in SCENARIOS)
    raise UsageError(f"unknown repro scenario {name!r} (known: {known})")


def build_command(scenario: Scenario, nproc: int, python: str | None = None) -> list[str]:
    """Return the command line that runs ``scenario`` with ``nproc`` ranks on this host.

    ``--standalone`` gives every run its own rendezvous port, so runs never collide.
    """
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(scenario.script),
    ]


def build_env(backend: str | None, culprit: int | None, timeout_s: int | None) -> dict[str, str]:
    """Return the environment variables that configure a scenario run."""
    env: dict[str, str] = {}
    if backend:
        env[BACKEND_ENV] = backend
    if culprit is not None:
        env[CULPRIT_ENV] = str(culprit)
    if timeout_s is not None:
        env[TIMEOUT_ENV] = str(timeout_s)
    return env
