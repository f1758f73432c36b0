"""Read ``py-spy dump --json`` output: a whole file, one array of thread objects.

docs/stack-dump-formats.md section 2. Unlike text dumps, the JSON has no line per frame,
so its frames carry no ``at`` and evidence quotes only the file's first line.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from logsleuth.errors import InputError
from logsleuth.model.base import Origin, SourceRef
from logsleuth.model.stacks import PYSPY_JSON, Frame, StackDump, ThreadStack

_JSON_THREAD_KEY = re.compile(r'"thread_id"\s*:')
_JSON_FRAMES_KEY = re.compile(r'"(frames|owns_gil)"\s*:')


def looks_like_pyspy_json(head: str) -> bool:
    """Tell from the first KB of a file whether it is ``py-spy dump --json`` output."""
    text = head.lstrip("\ufeff \t\r\n")
    return (
        text.startswith("[")
        and _JSON_THREAD_KEY.search(text) is not None
        and _JSON_FRAMES_KEY.search(text) is not None
    )


def _json_frame(item: object) -> Frame | None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    short, full = item.get("short_filename"), item.get("filename")
    file = short if isinstance(short, str) else full if isinstance(full, str) else None
    line = item.get("line")
    locals_: list[tuple[str, str]] = []
    raw_locals = item.get("locals")
    for var in raw_locals if isinstance(raw_locals, list) else ():
        if isinstance(var, dict) and isinstance(var.get("name"), str):
            value = var.get("repr")
            locals_.append((var["name"], value if isinstance(value, str) else "?"))
    return Frame(
        func=item["name"],
        file=file,
        line=line if isinstance(line, int) and line > 0 else None,
        native=item.get("module") is not None,
        locals=tuple(locals_),
    )


def _json_thread(item: object, index: int, source: str) -> tuple[int | None, ThreadStack]:
    if not isinstance(item, dict) or not isinstance(item.get("frames"), list):
        raise InputError(source, f"not py-spy JSON: element {index} is not a thread with frames")
    thread_id, os_tid = item.get("thread_id"), item.get("os_thread_id")
    if not isinstance(thread_id, int):
        raise InputError(source, f"not py-spy JSON: element {index} has no integer thread_id")
    pid = item.get("pid")
    pid = pid if isinstance(pid, int) and pid > 0 else None  # --core reports pid 0
    frames = []
    for raw in item["frames"]:
        frame = _json_frame(raw)
        if frame is None:
            raise InputError(source, f"not py-spy JSON: element {index} has a frame without a name")
        frames.append(frame)
    active, gil = bool(item.get("active")), bool(item.get("owns_gil"))
    name = item.get("thread_name")
    thread = ThreadStack(
        # Text mode prints the OS tid when known, else the pthread id: keep the same id.
        tid=os_tid if isinstance(os_tid, int) else thread_id,
        name=name if isinstance(name, str) else None,
        state="idle" if not active else "active+gil" if gil else "active",
        frames=tuple(frames),
        is_main=name == "MainThread" or (pid is not None and os_tid == pid),
    )
    return pid, thread


def parse_pyspy_json(text: str, source: str) -> list[StackDump]:
    """Parse ``py-spy dump --json`` output: one dump per pid, threads oldest first like text mode.

    Raises:
        InputError: ``text`` is not JSON, or not the array of thread objects py-spy writes.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.splitlines()
        excerpt = lines[exc.lineno - 1][:120] if 0 < exc.lineno <= len(lines) else ""
        raise InputError(source, f"not valid JSON ({exc.msg})", exc.lineno, excerpt) from exc
    if not isinstance(data, list):
        raise InputError(source, "not py-spy JSON: expected an array of threads")
    by_pid: dict[int | None, list[ThreadStack]] = {}
    for index, item in enumerate(data):
        pid, thread = _json_thread(item, index, source)
        by_pid.setdefault(pid, []).append(thread)
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines, 1) if line.strip()), 1)
    dumps = []
    for pid, threads in by_pid.items():
        # JSON keeps the interpreter's order, newest thread first; text mode reverses it.
        ordered = tuple(reversed(threads))
        if not any(t.is_main for t in ordered) and ordered:
            ordered = (replace(ordered[0], is_main=True), *ordered[1:])
        dumps.append(
            StackDump(
                ref=SourceRef(source, first),
                text=lines[first - 1] if lines else "",
                origin=Origin(pid=pid),
                fmt=PYSPY_JSON,
                pid=pid,
                cmdline=None,
                python=None,
                threads=ordered,
                last_line=len(lines),
            )
        )
    return dumps
