"""Faster pickling of the model's slotted dataclasses, for results sent between processes.

Worker processes (the local pool, Dask workers) send every input's events to the parent.
The ``__getstate__``/``__setstate__`` that ``dataclass(slots=True)`` generates call
:func:`dataclasses.fields` for every object; at 4,096 ranks that was a quarter of the run.
These replacements read and write the same state (the field values in field order) through
one precomputed :func:`operator.attrgetter`: a pickle made with either pair loads with the
other, so a worker and a parent need not agree on whether they were installed.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
from collections.abc import Callable
from typing import Any

_SET = object.__setattr__
_DONE: set[type] = set()


def _fast_state(cls: type) -> None:
    names = tuple(f.name for f in dataclasses.fields(cls))
    if not names:
        return
    getter = operator.attrgetter(*names)
    get: Callable[[Any], tuple[Any, ...]]
    if len(names) == 1:

        def get(obj: Any) -> tuple[Any, ...]:
            return (getter(obj),)

    else:
        get = getter

    def getstate(self: Any) -> tuple[Any, ...]:
        return get(self)

    def setstate(self: Any, state: Any) -> None:
        for name, value in zip(names, state, strict=True):
            _SET(self, name, value)

    setattr(cls, "__getstate__", getstate)  # noqa: B010 (assigning to a method)
    setattr(cls, "__setstate__", setstate)  # noqa: B010


def install(prefix: str = "logsleuth.model") -> int:
    """Give every slotted dataclass of the loaded ``prefix`` modules the fast state.

    Returns:
        How many classes were changed by this call.
    """
    changed = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == prefix or name.startswith(prefix + ".")):
            continue
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and value not in _DONE
                and value.__module__ == name
                and dataclasses.is_dataclass(value)
                and "__slots__" in vars(value)
            ):
                _fast_state(value)
                _DONE.add(value)
                changed += 1
    return changed
