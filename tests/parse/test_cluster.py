"""Inputs in object storage (a local S3 server) read on a Dask cluster: the same diagnosis.

moto's server mode stands in for S3; workers find it through ``AWS_ENDPOINT_URL``, as real
workers find their object store through their own environment.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.synth import generate
from logsleuth.cli import main

moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")
pytest.importorskip("dask.distributed")

BUCKET = "incidents"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A local S3 endpoint (moto) with one bucket; yields its URL."""
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    patch = pytest.MonkeyPatch()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }.items():
        patch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem().mkdir(BUCKET)
    try:
        yield endpoint
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        patch.undo()
        server.stop()


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory, s3: str) -> tuple[Path, str]:
    """A 16-rank incident with per-host splits, launcher log and stacks, on disk and in S3."""
    local = tmp_path_factory.mktemp("incident") / "job"
    generate(
        local,
        ranks=16,
        hosts=4,
        ops=40,
        fault="missing-collective",
        comms=2,
        launcher=True,
        stacks=True,
    )
    fs = s3fs.S3FileSystem()
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"{BUCKET}/job/{path.relative_to(local).as_posix()}")
    return local, f"s3://{BUCKET}/job"


def _diagnosis(tmp_path: Path, name: str, *args: str) -> tuple[int, bytes]:
    out = tmp_path / f"{name}.json"
    code = main(["analyze", *args, "--quiet", "--json", str(out)])
    return code, out.read_bytes()


def test_dask_local_cluster_reading_s3_gives_the_local_diagnosis_byte_for_byte(
    incident: tuple[Path, str], tmp_path: Path
) -> None:
    local, url = incident
    local_code, local_json = _diagnosis(tmp_path, "local", str(local))
    dask_code, dask_json = _diagnosis(tmp_path, "dask", url, "--scheduler", "local:2")
    assert local_code == dask_code == 1
    assert b'"kind": "missing-collective"' in local_json
    assert dask_json == local_json


def test_an_s3_prefix_read_without_a_cluster_gives_the_local_diagnosis(
    incident: tuple[Path, str], tmp_path: Path
) -> None:
    local, url = incident
    _, local_json = _diagnosis(tmp_path, "local", str(local))
    _, remote_json = _diagnosis(tmp_path, "remote", url + "/")
    assert remote_json == local_json


def test_a_glob_url_reads_only_the_matching_objects(
    incident: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = incident
    code = main(["analyze", f"{url}/nccl/*.log", "--format", "json"])
    assert code == 1
    out = capsys.readouterr().out
    # Named relative to the glob's directory, as the shell-expanded local glob would be.
    assert '"source": "gpu-node001.' in out
    assert "launcher.log" not in out
    assert "stacks/" not in out


def test_a_missing_bucket_is_a_one_line_error(s3: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "s3://no-such-bucket-here/job/", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "s3://no-such-bucket-here/job/" in err
    assert "no such bucket" in err
    assert "Traceback" not in err


def test_an_unreachable_scheduler_is_a_one_line_error(
    incident: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from logsleuth.parse import cluster

    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    local, _ = incident
    code = main(
        ["analyze", str(local), "--quiet", "--scheduler", f"tcp://127.0.0.1:{_free_port()}"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("logsleuth: error: --scheduler tcp://127.0.0.1:")
    assert "cannot reach the Dask scheduler" in err
    assert err.count("\n") == 1


def test_a_scheduler_that_is_no_address_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["analyze", "somewhere", "--scheduler", "http://example"])
    assert code == 2
    assert "expected tcp://HOST:PORT or local:N" in capsys.readouterr().err


def test_files_named_by_relative_paths_reach_the_workers_as_absolute_paths(
    incident: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from logsleuth.parse import cluster, dispatch
    from logsleuth.parse.discover import discover

    local, _ = incident
    monkeypatch.chdir(local.parent)
    sources, _ = discover([local.name])
    assert sources and not any(s.path is not None and s.path.is_absolute() for s in sources)
    shipped: list[Path] = []

    def fake_map(spec, fn, items, done=None):  # type: ignore[no-untyped-def]
        shipped.extend(source.path for source, _ in items)
        return map(fn, items)

    monkeypatch.setattr(cluster, "dask_map", fake_map)
    results = list(dispatch.read_inputs(sources, scheduler="tcp://127.0.0.1:1"))
    assert len(results) == len(sources)
    assert shipped and all(p.is_absolute() and p.exists() for p in shipped)


def test_workers_of_another_release_are_refused_with_one_line() -> None:
    from logsleuth.errors import UsageError
    from logsleuth.parse.cluster import check_workers

    check_workers({"tcp://10.0.0.2:41000": "0.1.0", "tcp://10.0.0.3:41000": "0.1.0"}, "0.1.0")
    with pytest.raises(UsageError) as caught:
        check_workers({"tcp://10.0.0.2:41000": "0.1.0", "tcp://10.0.0.3:41000": "0.0.9"}, "0.1.0")
    message = str(caught.value)
    assert "\n" not in message
    assert "1 of 2" in message and "0.0.9" in message and "tcp://10.0.0.3:41000" in message
