"""Read the WARN rows of the NCCL format catalog and turn format strings into sample lines."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NCCL_FORMATS = ROOT / "grammars" / "catalogs" / "nccl-log-formats.tsv"
TORCH_MESSAGES = ROOT / "grammars" / "catalogs" / "torch-distributed-messages.tsv"

_CONVERSION = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.\d+)?(hh|h|ll|l|z|j|t)?([diouxXcspfgem%])")
_SAMPLE = {
    "d": "12",
    "i": "12",
    "u": "12",
    "o": "17",
    "f": "1.5",
    "g": "1.5",
    "e": "1.5",
    "c": "x",
    "s": "mlx5_0",
    "p": "0x7f3a2c001200",
    "m": "Cannot allocate memory",
    "%": "%",
}


@dataclass(frozen=True)
class FormatRow:
    """One row of ``nccl-log-formats.tsv``."""

    line: int
    level: str
    versions: str
    file: str
    format: str


def read_rows(path: Path = NCCL_FORMATS) -> list[FormatRow]:
    """Return the rows of the NCCL catalog with their line numbers."""
    rows: list[FormatRow] = []
    with path.open(encoding="utf-8") as handle:
        lines = [(n, t) for n, t in enumerate(handle, 1) if not t.startswith("#")]
    header, *body = lines
    names = header[1].rstrip("\n").split("\t")
    for number, text in body:
        cells = dict(
            zip(
                names,
                next(csv.reader([text.rstrip("\n")], delimiter="\t", quoting=csv.QUOTE_NONE)),
                strict=False,
            )
        )
        rows.append(
            FormatRow(number, cells["level"], cells["versions"], cells["file"], cells["format"])
        )
    return rows


def warn_rows() -> list[FormatRow]:
    """Return the WARN rows of the NCCL catalog."""
    return [r for r in read_rows() if r.level == "WARN"]


ALTERNATE = {"d": "0", "i": "0", "u": "3", "s": "eth1", "p": "0x55d1e0", "x": "1b000"}
"""A second set of arguments, so that no pattern keys on one sample value."""


def instantiate(fmt: str, samples: dict[str, str] | None = None) -> str:
    """Return the message NCCL prints for ``fmt`` with sample arguments.

    ``%d`` -> 12, ``%s`` -> mlx5_0, ``%p`` -> 0x7f3a..., ``%lx``/``%x`` -> hex digits
    (NCCL prints them bare; ``0x%lx`` stays one number), ``{name}`` (a SYSCHECK macro) ->
    a call name, ``\\n`` -> a space, ``\\"`` -> a quote.
    """
    text = fmt.replace('\\"', '"').replace("\\n", " ").replace("\\t", " ")
    text = re.sub(r"\{name\}", "ibv_reg_mr", text)

    chosen = {**_SAMPLE, "x": "7f3a2c", "X": "7f3a2c", **(samples or {})}

    def sample(found: re.Match[str]) -> str:
        return chosen[found.group(2)]

    return _CONVERSION.sub(sample, text).strip()


def nccl_line(
    message: str,
    file: str = "init.cc",
    host: str = "gpu-node001",
    pid: int = 56683,
    tid: int = 56690,
) -> str:
    """Return ``message`` as a WARN line with NCCL's prefix (``host:pid:tid [dev] file:line``)."""
    source = file.split(",")[0]
    return f"{host}:{pid}:{tid} [0] {source}:123 NCCL WARN {message}"


@dataclass(frozen=True)
class MessageRow:
    """One row of ``torch-distributed-messages.tsv``."""

    line: int
    level: str
    component: str
    format: str
    meaning: str


def torch_rows(path: Path = TORCH_MESSAGES) -> list[MessageRow]:
    """Return the rows of the framework message catalog with their line numbers."""
    rows: list[MessageRow] = []
    with path.open(encoding="utf-8") as handle:
        lines = [(n, t) for n, t in enumerate(handle, 1) if not t.startswith("#")]
    header, *body = lines
    names = header[1].rstrip("\n").split("\t")
    for number, text in body:
        cells = dict(zip(names, text.rstrip("\n").split("\t"), strict=False))
        rows.append(
            MessageRow(
                number,
                cells["level"],
                cells["component"],
                cells["format"],
                cells.get("meaning", ""),
            )
        )
    return rows


def instantiate_torch(fmt: str) -> str:
    """Return a framework message with sample arguments: ``{}``, ``{name}``, ``%s``, ``${x}`` -> 7."""
    text = fmt.replace("\\n", " ").replace("\\t", " ").replace('\\"', '"')
    text = re.sub(r"\$\{\w+\}", "7", text)
    text = re.sub(r"\{[^{}]*\}", "7", text)
    return re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[lz]*[dsfuxg]", "7", text).strip()
