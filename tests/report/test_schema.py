"""The JSON Schema of ``logsleuth.diagnosis/1``: generated from the model, and true of real output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from logsleuth.cli import main
from logsleuth.model.diagnosis import Diagnosis
from logsleuth.report.json import render_json
from logsleuth.report.schema import build_schema, render_schema
from tests.report import diagnoses

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_JSON = sorted((ROOT / "tests" / "golden").rglob("*.json"))
DIAGNOSES: dict[str, Diagnosis] = {
    "missing_collective": diagnoses.missing_collective(),
    "healthy": diagnoses.healthy(),
    "hostile": diagnoses.hostile(),
}
CASES = sorted(
    p
    for p in [
        *(ROOT / "fixtures" / "synthetic").iterdir(),
        *(ROOT / "fixtures" / "real" / "live").iterdir(),
    ]
    if p.is_dir()
)


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = build_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _errors(validator: Draft202012Validator, document: object) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(document)
    ]


@pytest.mark.parametrize("golden", GOLDEN_JSON, ids=lambda p: p.name)
def test_golden_diagnoses_validate(validator: Draft202012Validator, golden: Path) -> None:
    assert _errors(validator, json.loads(golden.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("name", sorted(DIAGNOSES))
def test_report_test_diagnoses_validate(validator: Draft202012Validator, name: str) -> None:
    assert _errors(validator, json.loads(render_json(DIAGNOSES[name]))) == []


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_analysed_fixtures_validate(
    validator: Draft202012Validator, case: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["analyze", str(case), "--json", "-"])
    assert _errors(validator, json.loads(capsys.readouterr().out)) == []


def test_schema_is_strict_enough_to_catch_drift(validator: Draft202012Validator) -> None:
    document = json.loads(render_json(DIAGNOSES[sorted(DIAGNOSES)[0]]))
    document["verdict"]["kind"] = "not-a-kind"
    document["findings"].append({"code": "LS999"})
    document["extra"] = 1
    errors = "\n".join(_errors(validator, document))
    assert "verdict/kind: 'not-a-kind' is not one of" in errors
    assert "Additional properties are not allowed ('extra' was unexpected)" in errors
    assert "'name' is a required property" in errors


def test_descriptions_come_from_the_model_docstrings() -> None:
    schema = build_schema()
    context = schema["$defs"]["Evidence"]["properties"]
    assert schema["$defs"]["Finding"]["properties"]["evidence_total"]["description"].startswith(
        "How many lines supported the finding"
    )
    assert context["context"]["items"]["required"] == ["line", "text"]
    assert schema["properties"]["schema"] == {"const": "logsleuth.diagnosis/1"}


def test_schema_command_prints_the_same_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    out = capsys.readouterr().out
    assert out == render_schema()
    assert json.loads(out)["title"] == "logsleuth.diagnosis/1"
