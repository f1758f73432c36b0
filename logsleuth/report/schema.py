"""The JSON Schema of ``logsleuth.diagnosis/1``, generated from the model dataclasses.

Each JSON object is a model dataclass: its fields, typed from their annotations, documented
from their docstrings. Where :mod:`logsleuth.report.json` writes a field in another shape
than the dataclass holds it (pairs become objects, a tuple of (key, count) a mapping), the
table :data:`_SHAPES` says so, and a field the JSON leaves out is listed in :data:`_DROPPED`.
Every object is closed (``additionalProperties: false``) and every key required, so a key
added to the JSON without the schema, or the other way round, fails the tests that validate
real diagnoses against it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import json
import textwrap
import types
import typing
from functools import cache
from typing import Any

from logsleuth.model import diagnosis as d
from logsleuth.model import topology as t
from logsleuth.model import waitfor as w
from logsleuth.report.json import GENERATOR, SCHEMA

SCHEMA_ID = "https://logsleuth.invalid/schema/diagnosis-1.json"
"""The schema's ``$id``: a name, not a location (the schema ships with logsleuth)."""

JSONSchema = dict[str, Any]

_STRING: JSONSchema = {"type": "string"}
_INT: JSONSchema = {"type": "integer"}
_RANKS_TEXT: JSONSchema = {
    "type": "string",
    "description": "Ranks as ranges, e.g. '0-36,38-63' (empty when none).",
}


def _ref(cls: type) -> JSONSchema:
    return {"$ref": f"#/$defs/{cls.__name__}"}


def _nullable(schema: JSONSchema) -> JSONSchema:
    return {"anyOf": [schema, {"type": "null"}]}


def _mapping(values: JSONSchema, description: str) -> JSONSchema:
    return {"type": "object", "additionalProperties": values, "description": description}


_SHAPES: dict[tuple[type, str], JSONSchema] = {
    (d.Evidence, "context"): {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"line": _INT, "text": _STRING},
            "required": ["line", "text"],
            "additionalProperties": False,
        },
    },
    (d.JobView, "nccl_versions"): _mapping(
        {"type": "array", "items": _INT}, "NCCL version -> the ranks that logged it."
    ),
    (d.CommunicatorView, "last_op_counts"): {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"ranks": _RANKS_TEXT, "op_count": _INT, "collective": _STRING},
            "required": ["ranks", "op_count", "collective"],
            "additionalProperties": False,
        },
    },
    (d.CommunicatorView, "transports"): _mapping(_INT, "Transport -> connection lines."),
    (t.TopologyView, "transports"): _mapping(_INT, "Transport -> connection lines."),
    (t.TopologyView, "rings"): {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"channel": _INT, "order": {"type": "array", "items": _INT}},
            "required": ["channel", "order"],
            "additionalProperties": False,
        },
    },
    (t.TopoHost, "ranks"): _RANKS_TEXT,
    (d.StackTreeNode, "ranks"): _RANKS_TEXT,
    (d.StackSuspect, "stack_class"): {
        **_INT,
        "description": "The suspect class, as its index in ``stacks.classes``.",
    },
    (w.WaitFor, "victims"): {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"node": _STRING, "reason": _STRING},
            "required": ["node", "reason"],
            "additionalProperties": False,
        },
        "description": "Processes that only waited: the node and the edge that makes it a victim.",
    },
    (d.JobView, "host_aliases"): _mapping(
        {"type": "array", "items": _STRING},
        "Host as the report names it -> the other names the evidence gives the same machine.",
    ),
    (d.Verdict, "kind"): {"enum": list(d.KINDS)},
    (d.Finding, "kind"): {"enum": list(d.KINDS)},
    (d.Finding, "severity"): {"enum": list(d.SEVERITIES)},
}
"""Fields whose JSON shape is not the one their annotation gives."""

_RENAMED: dict[tuple[type, str], str] = {
    (d.CommProgress, "id"): "communicator",
    (d.StackSuspect, "stack_class"): "class_index",
}
"""Fields the JSON names differently."""

_DROPPED: dict[type, frozenset[str]] = {
    w.WaitNode: frozenset({"category"}),
    t.TopoRank: frozenset({"nics", "network"}),
    d.Diagnosis: frozenset(
        {"version", "topology", "stack_classes", "stack_tree", "stack_suspects"}
    ),
}
"""Fields the JSON leaves out (the diagnosis's are placed elsewhere, see :func:`build_schema`)."""

_ADDED: dict[type, dict[str, JSONSchema]] = {
    w.WaitFor: {
        "edges_total": {
            **_INT,
            "description": "Every edge of the graph; ``edges`` lists those into the culprits first.",
        }
    },
    d.JobView: {
        "nccl_version_hosts": _mapping(
            {"type": "array", "items": _STRING}, "NCCL version -> the hosts that logged it."
        )
    },
    d.CommunicatorView: {
        "topology": {
            "anyOf": [_ref(t.TopologyView), {"type": "null"}],
            "description": "The rebuilt topology, when the communicator logged its init.",
        }
    },
}
"""Keys the JSON adds to a dataclass's fields."""


@cache
def _field_docs(cls: type) -> dict[str, str]:
    """Return field -> the docstring under it in the class body (empty when no source)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _type_schema(hint: Any) -> JSONSchema:
    """Return the schema of a field annotation (str, int, float, bool, None, unions, tuples)."""
    if hint is str:
        return dict(_STRING)
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return dict(_INT)
    if hint is float:
        return {"type": "number"}
    if hint is type(None):
        return {"type": "null"}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _ref(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(a) for a in args]}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0])}
        return {
            "type": "array",
            "prefixItems": [_type_schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    raise TypeError(f"no JSON Schema for the annotation {hint!r}")


def _object(cls: type) -> JSONSchema:
    """Return the closed object schema of a dataclass as the JSON writes it."""
    # Model modules that import each other only for type checking resolve in the diagnosis
    # module's namespace, where every model value the diagnosis carries is named.
    hints = typing.get_type_hints(cls, localns=vars(d))
    docs = _field_docs(cls)
    dropped = _DROPPED.get(cls, frozenset())
    properties: dict[str, JSONSchema] = {}
    for field in dataclasses.fields(cls):
        if field.name in dropped:
            continue
        schema = dict(_SHAPES.get((cls, field.name)) or _type_schema(hints[field.name]))
        if field.name in docs and "description" not in schema:
            schema["description"] = docs[field.name]
        properties[_RENAMED.get((cls, field.name), field.name)] = schema
    properties.update(_ADDED.get(cls, {}))
    summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else cls.__name__
    return {
        "type": "object",
        "description": summary,
        "properties": dict(sorted(properties.items())),
        "required": sorted(properties),
        "additionalProperties": False,
    }


def _definitions(root: type) -> dict[str, JSONSchema]:
    """Return ``$defs``: every dataclass reachable from ``root``'s fields, by class name."""
    found: dict[str, JSONSchema] = {}
    pending = [root]
    while pending:
        cls = pending.pop()
        if cls.__name__ in found:
            continue
        schema = _object(cls)
        found[cls.__name__] = schema
        for hint in typing.get_type_hints(cls, localns=vars(d)).values():
            pending.extend(_dataclasses_in(hint))
        for extra in _ADDED.get(cls, {}).values():
            for option in extra.get("anyOf", []):
                if "$ref" in option:
                    pending.append(_BY_NAME[option["$ref"].rsplit("/", 1)[1]])
    return dict(sorted(found.items()))


def _dataclasses_in(hint: Any) -> list[type]:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return [hint]
    return [c for a in typing.get_args(hint) for c in _dataclasses_in(a)]


_BY_NAME = {
    cls.__name__: cls
    for module in (d, t)
    for cls in vars(module).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls)
}


def build_schema() -> JSONSchema:
    """Return the JSON Schema (draft 2020-12) of the diagnosis document."""
    defs = _definitions(d.Diagnosis)
    top = defs.pop("Diagnosis")
    properties = dict(top["properties"])
    properties.update(
        {
            "schema": {"const": SCHEMA},
            "generator": {
                "type": "object",
                "properties": {"name": {"const": GENERATOR}, "version": _STRING},
                "required": ["name", "version"],
                "additionalProperties": False,
            },
            "stacks": {
                "type": "object",
                "description": "Ranks grouped by identical main-thread stacks, the classes "
                "merged into one STAT prefix tree, and the classes that differ from the majority.",
                "properties": {
                    "classes": {"type": "array", "items": _ref(d.StackClass)},
                    "tree": _nullable(_ref(d.StackTreeNode)),
                    "suspects": {"type": "array", "items": _ref(d.StackSuspect)},
                },
                "required": ["classes", "suspects", "tree"],
                "additionalProperties": False,
            },
        }
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": SCHEMA,
        "description": "What logsleuth concluded about a distributed training job: the "
        "verdict, every finding with its evidence, and the views the reports show "
        "(docs/CONTRACT.md section 3).",
        "type": "object",
        "properties": dict(sorted(properties.items())),
        "required": sorted(properties),
        "additionalProperties": False,
        "$defs": defs,
    }


def render_schema() -> str:
    """Render the schema as indented, key-sorted JSON ending in a newline."""
    return json.dumps(build_schema(), indent=2, sort_keys=True) + "\n"
