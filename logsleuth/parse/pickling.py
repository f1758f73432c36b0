"""Faster pickling of the model's slotted dataclasses, for results sent between processes.

Worker processes (the local pool, Dask workers) send every input's events to the parent.
The ``__getstate__``/``__setstate__`` that ``dataclass(slots=True)`` generates call
:func:`dataclasses.fields` for every object; at 4,096 ranks that was a quarter of the run.
These replacements, generated per class as :mod:`dataclasses` generates ``__init__``, read
and write the same state (the field values in field order) without that call: a pickle made
with either pair loads with the other, so a worker and a parent need not agree on whether
they were installed.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable
from typing import Any

_DONE: set[type] = set()


def _fast_state(cls: type) -> None:
    names = tuple(f.name for f in dataclasses.fields(cls))
    if not names:
        return
    setattr(cls, "__getstate__", _getter(names))  # noqa: B010 (assigning to a method)
    setattr(cls, "__setstate__", _setter(cls, names))  # noqa: B010


def _slot(cls: type, name: str) -> Any:
    """The slot descriptor of field ``name`` (a base class's, for an inherited field)."""
    for klass in cls.__mro__:
        found = vars(klass).get(name)
        if isinstance(found, types.MemberDescriptorType):
            return found
    raise TypeError(f"{cls.__name__}.{name} is not a slot")


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A ``__getstate__`` that reads the fields in one expression (``(self.a, self.b)``)."""
    if not all(name.isidentifier() for name in names):
        raise TypeError(f"not field names: {names}")
    code = "def getstate(self):\n    return (" + "".join(f"self.{n}, " for n in names) + ")\n"
    scope: dict[str, Any] = {}
    exec(code, scope)  # the code names only the class's own fields
    getstate: Callable[[Any], tuple[Any, ...]] = scope["getstate"]
    return getstate


def _setter(cls: type, names: tuple[str, ...]) -> Callable[[Any, Any], None]:
    """A ``__setstate__`` that stores each value through its slot descriptor directly.

    The parent process loads every event the workers read: the generated function (one
    statement per field, as :mod:`dataclasses` builds its ``__init__``) takes half the
    time of a loop over ``object.__setattr__``, which looks each name up again. A state of
    the wrong length raises ValueError, as ``zip(strict=True)`` did.
    """
    values = ", ".join(f"v{i}" for i in range(len(names)))
    body = "".join(f"    s{i}(self, v{i})\n" for i in range(len(names)))
    code = f"def setstate(self, state):\n    {values}, = state\n{body}"
    scope: dict[str, Any] = {f"s{i}": _slot(cls, name).__set__ for i, name in enumerate(names)}
    exec(code, scope)  # the code names no field: only v0.. and s0..
    setstate: Callable[[Any, Any], None] = scope["setstate"]
    return setstate


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
