"""The diagnostics environment: what live mode sets, and what it leaves to the user."""

from __future__ import annotations

from pathlib import Path

from logsleuth.live.environment import (
    BOOTSTRAP_DIR,
    RUN_MARKER,
    diagnostics_env,
    installed_torch_version,
    job_env,
    job_torch_version,
    recorded_env,
)


def test_diagnostics_point_into_the_bundle(tmp_path: Path) -> None:
    env = diagnostics_env(tmp_path / "b", nccl_subsys="INIT,COLL")
    out = (tmp_path / "b").resolve()
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,COLL"
    assert env["NCCL_DEBUG_FILE"] == f"{out}/nccl/%h.%p.log"
    assert (
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
        == env["TORCH_FR_DUMP_TEMP_FILE"]
        == f"{out}/fr/rank_"
    )
    assert env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == f"{out}/fr/pipe_"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_FR_BUFFER_SIZE"] == env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert env["TORCH_CPP_LOG_LEVEL"] == "WARNING"
    assert env["PYTHONUNBUFFERED"] == env["PYTHONFAULTHANDLER"] == "1"
    assert "TORCH_DISTRIBUTED_DEBUG" not in env
    detail = diagnostics_env(tmp_path, distributed_debug=True)
    assert (detail["TORCH_DISTRIBUTED_DEBUG"], detail["TORCH_CPP_LOG_LEVEL"]) == ("DETAIL", "INFO")


def test_flight_recorder_names_follow_the_jobs_torch(tmp_path: Path) -> None:
    """2.8+ warns in every rank about the older names: set only the ones it reads."""
    new = diagnostics_env(tmp_path, torch_version=(2, 13))
    assert new["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_FR_DUMP_TEMP_FILE" in new
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in new
    assert "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in new
    old = diagnostics_env(tmp_path, torch_version=(2, 7))
    assert old["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000" and "TORCH_FR_BUFFER_SIZE" not in old


def test_installed_torch_version_reads_the_metadata() -> None:
    import importlib.util

    version = installed_torch_version()
    if importlib.util.find_spec("torch") is None:
        assert version is None
    else:
        assert version is not None and version >= (2, 0)


def test_the_users_own_settings_win(tmp_path: Path) -> None:
    base = {"NCCL_DEBUG": "WARN", "PATH": "/bin"}
    env = job_env(base, diagnostics_env(tmp_path), "run-1")
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,COLL,NET"
    assert env["PATH"] == "/bin"
    assert env[RUN_MARKER] == "run-1"
    recorded = recorded_env(env)
    assert recorded["NCCL_DEBUG"] == "WARN"
    assert "PATH" not in recorded and RUN_MARKER not in recorded


def test_the_bootstrap_goes_first_on_the_python_path(tmp_path: Path) -> None:
    assert (BOOTSTRAP_DIR / "sitecustomize.py").is_file()
    env = job_env({"PYTHONPATH": "/src:/lib"}, diagnostics_env(tmp_path), "run-1")
    assert env["PYTHONPATH"] == f"{BOOTSTRAP_DIR}:/src:/lib"
    assert recorded_env(env)["PYTHONPATH"] == env["PYTHONPATH"]
    assert job_env({}, {}, "run-1")["PYTHONPATH"] == str(BOOTSTRAP_DIR)
    assert "PYTHONPATH" not in job_env({}, {}, "run-1", exception_dumps=False)


def test_the_jobs_torch_is_asked_through_its_python(tmp_path: Path) -> None:
    """torchrun's shebang names the job's Python; that Python says which torch it has."""
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho 2.7.1+cu126\n")
    fake.chmod(0o755)
    launcher = tmp_path / "torchrun"
    launcher.write_text(f"#!{fake}\nimport sys\n")
    launcher.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    assert job_torch_version(["torchrun", "--nproc_per_node", "2", "t.py"], env) == (2, 7)
    assert job_torch_version([str(fake), "-m", "torch.distributed.run"], env) == (2, 7)
    env_shebang = tmp_path / "launch"
    env_shebang.write_text("#!/usr/bin/env python3\n")
    env_shebang.chmod(0o755)
    assert job_torch_version(["launch"], env) == (2, 7)
    # Not a Python: this environment's torch, whatever it is.
    assert job_torch_version(["/bin/sleep", "1"], env) == installed_torch_version()
