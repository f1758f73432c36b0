"""The diagnosis JSON: CONTRACT section 3 keys, values a script reads, byte-identical output."""

from __future__ import annotations

import dataclasses
import json

from logsleuth.model.diagnosis import Evidence
from logsleuth.report.json import build_json, render_json
from tests.conftest import Golden
from tests.report.diagnoses import COMM, healthy, missing_collective

CONTRACT_TOP = {
    "schema",
    "generator",
    "verdict",
    "findings",
    "job",
    "communicators",
    "stacks",
    "inputs",
}
CONTRACT_FINDING = {
    "code",
    "kind",
    "severity",
    "title",
    "detail",
    "ranks",
    "hosts",
    "pids",
    "communicator",
    "confidence",
    "evidence",
    "next_steps",
}


def test_top_level_keys_follow_the_contract() -> None:
    data = build_json(missing_collective())
    assert set(data) >= CONTRACT_TOP
    assert set(data) - CONTRACT_TOP == {
        "ranks",
        "gaps",
        "progress",
        "timeline",
        "config",
        "waitfor",
        "p2p",
    }
    assert data["schema"] == "logsleuth.diagnosis/1"
    assert data["generator"] == {"name": "logsleuth", "version": "0.1.0"}


def test_verdict_names_the_culprit_with_rounded_confidence() -> None:
    assert build_json(missing_collective())["verdict"] == {
        "kind": "missing-collective",
        "summary": (
            "rank 5 (node-b pid 4105) never entered AllReduce #412 on comm "
            "0x7f3a9c2b11d04e55; the other 7 ranks wait in it"
        ),
        "code": "LS101",
        "culprit_ranks": [5],
        "culprit_hosts": ["node-b"],
        "culprit_pids": [4105],
        "confidence": 0.9,
    }


def test_findings_carry_contract_keys_and_evidence() -> None:
    findings = build_json(missing_collective())["findings"]
    assert isinstance(findings, list)
    assert [f["code"] for f in findings] == ["LS101", "LS203", "LS302", "LS305"]
    first = findings[0]
    assert set(first) >= CONTRACT_FINDING
    assert first["name"] == "collective.missing"
    assert first["communicator"] == COMM
    assert first["confidence"] == 0.9
    assert first["evidence_total"] == 9
    assert first["evidence"][0] == {
        "source": "nccl/node-b.log",
        "line": 1187,
        "text": (
            "node-b:4105:4105 [1] NCCL INFO AllReduce: opCount 19b sendbuff 0x7f2c1a000000 "
            "recvbuff 0x7f2c1a000000 count 2097152 datatype 7 op 0 root 0 comm 0x55d2c0 "
            "[nranks=8] stream 0x55d2e0"
        ),
        "context": [
            {
                "line": 1184,
                "text": (
                    "node-b:4105:4105 [1] NCCL INFO AllReduce: opCount 19a sendbuff "
                    "0x7f2c1a000000 recvbuff 0x7f2c1a000000 count 2097152 datatype 7 op 0 root 0 "
                    "comm 0x55d2c0 [nranks=8] stream 0x55d2e0"
                ),
            },
            {
                "line": 1189,
                "text": "node-b:4105:4105 [1] NCCL INFO comm 0x55d2c0 rank 5 - Abort COMPLETE",
            },
        ],
    }
    assert findings[0]["evidence"][1]["context"] == []
    assert findings[1]["ranks"] == [0, 1, 2, 3, 4, 6, 7]
    assert findings[3]["next_steps"] == []


def test_job_maps_each_nccl_version_to_its_ranks() -> None:
    job = build_json(missing_collective())["job"]
    assert job == {
        "world_size": 8,
        "hosts": ["node-a", "node-b"],
        "nccl_versions": {"2.21.5": [0, 1, 2, 3, 4, 5, 6, 7]},
        "nccl_version_hosts": {"2.21.5": ["node-a", "node-b"]},
        "torch_version": "2.13.0",
        "launcher": "torchrun",
        "time_range": ["2026-03-21 01:58:40", "2026-03-21 02:07:09"],
        "host_aliases": {},
    }


def test_communicators_stacks_and_inputs() -> None:
    data = build_json(missing_collective())
    comms = data["communicators"]
    assert isinstance(comms, list)
    assert comms[0]["id"] == COMM
    assert comms[0]["ranks_seen"] == "0-7"
    assert comms[0]["last_op_counts"][1] == {
        "ranks": "5",
        "op_count": 411,
        "collective": "AllReduce",
    }
    assert comms[0]["transports"] == {"NET/Socket": 16, "P2P/IPC": 24}
    assert comms[1]["init_missing"] == "4"
    classes = data["stacks"]["classes"]  # type: ignore[index]
    assert [(c["ranks"], c["count"], c["category"]) for c in classes] == [
        ("0-4,6-7", 7, "collective"),
        ("5", 1, "data-loading"),
    ]
    assert classes[1]["call_site"] == "train_loop (train.py:61)"
    assert classes[1]["frames"][0] == "wait (threading.py:331)"
    inputs = data["inputs"]
    assert isinstance(inputs, list)
    assert inputs[0] == {
        "source": "launcher.log",
        "kind": "torch-log",
        "lines": 120,
        "recognized": 97,
        "unrecognized": 15,
        "blank": 8,
        "error": None,
    }


def test_healthy_job_has_empty_culprits() -> None:
    verdict = build_json(healthy())["verdict"]
    assert verdict["kind"] == "healthy"  # type: ignore[index]
    assert verdict["culprit_ranks"] == []  # type: ignore[index]
    assert verdict["culprit_hosts"] == []  # type: ignore[index]
    assert verdict["culprit_pids"] == []  # type: ignore[index]


def test_same_diagnosis_gives_identical_bytes() -> None:
    first = render_json(missing_collective())
    second = render_json(missing_collective())
    assert first.encode() == second.encode()


def test_set_like_lists_are_sorted_whatever_the_input_order() -> None:
    d = missing_collective()
    shuffled = dataclasses.replace(
        d,
        verdict=dataclasses.replace(d.verdict, culprit_ranks=(5, 3), culprit_pids=(4105, 4103)),
        job=dataclasses.replace(d.job, hosts=("node-b", "node-a")),
    )
    data = build_json(shuffled)
    assert data["verdict"]["culprit_ranks"] == [3, 5]  # type: ignore[index]
    assert data["verdict"]["culprit_pids"] == [4103, 4105]  # type: ignore[index]
    assert data["job"]["hosts"] == ["node-a", "node-b"]  # type: ignore[index]


def test_render_is_indented_key_sorted_and_ends_with_newline() -> None:
    text = render_json(missing_collective())
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert json.loads(text) == build_json(missing_collective())


def test_undecodable_and_non_ascii_text_is_escaped_ascii() -> None:
    d = missing_collective()
    odd = Evidence("nccl/node-b.log", 3, "caf\u00e9 \udcff done")
    primary = dataclasses.replace(d.findings[0], evidence=(odd,))
    text = render_json(dataclasses.replace(d, findings=(primary,)))
    assert text.isascii()
    assert '"text": "caf\\u00e9 \\udcff done"' in text


def test_golden_json(golden: Golden) -> None:
    golden.check("report/missing_collective.json", render_json(missing_collective()))


def test_overview_views_carry_progress_timeline_and_config() -> None:
    data = build_json(missing_collective())
    assert data["progress"][0] == {
        "communicator": COMM,
        "nranks": 8,
        "members": 8,
        "laggards": "5",
        "groups": [
            {
                "ranks": "0-4,6-7",
                "count": 7,
                "op_count": 412,
                "collective": "AllReduce",
                "behind": 0,
            },
            {"ranks": "5", "count": 1, "op_count": 411, "collective": "AllReduce", "behind": 1},
        ],
    }
    first = data["timeline"][0]
    assert (first["kind"], first["ranks"], first["processes"], first["time"]) == (
        "watchdog timeout",
        "0-4,6-7",
        7,
        "02:07:08.408",
    )
    assert first["evidence"]["source"] == "launcher.log"
    assert data["config"][0] == {
        "key": "NCCL_P2P_DISABLE",
        "differs": True,
        "unset": "4-7",
        "values": [{"value": "1", "ranks": "0-3", "processes": 4, "hosts": ["node-a"]}],
    }
