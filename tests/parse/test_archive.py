"""Bundles as people attach them: tar/zip archives read in memory, unsafe ones refused."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from logsleuth.cli import main
from logsleuth.parse import archive
from logsleuth.parse.archive import ArchiveError, read_archive, write_archive
from logsleuth.parse.discover import _skipped, discover

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "fixtures" / "real" / "live" / "size-mismatch"


def _analyze_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["analyze", str(path), "--json", "-"])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_packed_bundle_gives_the_same_diagnosis_as_the_directory(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / f"bundle.{fmt}"
    assert main(["pack", str(BUNDLE), "--output", str(target)]) == 0
    assert str(target) in capsys.readouterr().out
    from_dir = _analyze_json(BUNDLE, capsys)
    from_archive = _analyze_json(target, capsys)
    assert from_dir[0] == 1
    assert json.loads(from_dir[1])["verdict"]["kind"] == "collective-mismatch"
    assert from_archive == from_dir


@pytest.mark.parametrize("suffix", [".tar", ".tgz", ".tar.bz2"])
def test_tar_variants_written_by_tar_are_read(suffix: str, tmp_path: Path) -> None:
    mode = {".tar": "w", ".tgz": "w:gz", ".tar.bz2": "w:bz2"}[suffix]
    target = tmp_path / f"b{suffix}"
    with tarfile.open(target, mode) as tar:
        tar.add(BUNDLE, arcname="size-mismatch")
    sources, problems = discover([str(target)])
    assert problems == []
    names = [s.name for s in sources]
    assert "launcher.log" in names and "manifest.json" in names
    assert names == [s.name for s in discover([str(BUNDLE)])[0]]


def test_packing_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    write_archive(BUNDLE, first)
    write_archive(BUNDLE, second)
    assert first.read_bytes() == second.read_bytes()


def test_archive_inside_a_directory_and_beside_others_is_named_by_its_path(
    tmp_path: Path,
) -> None:
    write_archive(BUNDLE, tmp_path / "node1.zip")
    (tmp_path / "extra.log").write_text("hello\n", encoding="utf-8")
    sources, problems = discover([str(tmp_path)])
    assert problems == []
    names = [s.name for s in sources]
    assert "extra.log" in names and "node1.zip/launcher.log" in names


def test_previous_outputs_inside_the_archive_are_skipped(tmp_path: Path) -> None:
    target = tmp_path / "b.zip"
    with zipfile.ZipFile(target, "w") as z:
        z.writestr("b/launcher.log", "x\n")
        z.writestr("b/diagnosis.json", "{}")
        z.writestr("b/report.html", "<html>")
        z.writestr("b/.hidden/x.log", "x\n")
    assert [m.name for m in read_archive(target, _skipped)] == ["launcher.log"]


def _tar_with(tmp_path: Path, *infos: tuple[tarfile.TarInfo, bytes]) -> Path:
    target = tmp_path / "evil.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        good = tarfile.TarInfo("b/launcher.log")
        good.size = 2
        tar.addfile(good, io.BytesIO(b"x\n"))
        for info, data in infos:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return target


def _refused(path: Path, capsys: pytest.CaptureFixture[str], reason: str) -> None:
    before = set(os.listdir(path.parent)) | set(os.listdir(path.parent.parent))
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"{path.name}: " in err and reason in err, err
    assert set(os.listdir(path.parent)) | set(os.listdir(path.parent.parent)) == before


def test_path_traversal_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = tarfile.TarInfo("b/../../escaped.txt")
    info.size = 3
    _refused(_tar_with(tmp_path, (info, b"hi\n")), capsys, "leaves the archive (..)")


def test_absolute_member_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "abs.zip"
    with zipfile.ZipFile(target, "w") as z:
        z.writestr("/tmp/evil.log", "x\n")
    _refused(target, capsys, "has an absolute path")


def test_symlink_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tarfile.TarInfo("b/nccl/rank0.log")
    link.type = tarfile.SYMTYPE
    link.linkname = "../../../etc/passwd"
    _refused(_tar_with(tmp_path, (link, b"")), capsys, "links outside the archive")


def test_zip_symlink_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "link.zip"
    with zipfile.ZipFile(target, "w") as z:
        z.writestr("b/launcher.log", "x\n")
        info = zipfile.ZipInfo("b/secret.log")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(info, "/etc/shadow")
    _refused(target, capsys, "links outside the archive ('/etc/shadow')")


def test_symlink_inside_is_skipped(tmp_path: Path) -> None:
    link = tarfile.TarInfo("b/latest.log")
    link.type = tarfile.SYMTYPE
    link.linkname = "launcher.log"
    names = [m.name for m in read_archive(_tar_with(tmp_path, (link, b"")))]
    assert names == ["launcher.log"]


def test_decompression_bomb_is_refused_while_decompressing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 64 MiB of zeros, 64 KiB on disk; the limit is lowered so the test stays small.
    monkeypatch.setattr(archive, "MAX_TOTAL_BYTES", 16 * 1024**2)
    target = tmp_path / "bomb.zip"
    with (
        zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as z,
        z.open("b/nccl/rank0.log", "w") as member,
    ):
        for _ in range(64):
            member.write(bytes(1024**2))
    assert target.stat().st_size < 1024**2
    _refused(target, capsys, "expands to more than 16 MiB")


def test_tar_member_declaring_a_huge_size_is_refused_before_reading(tmp_path: Path) -> None:
    target = tmp_path / "big.tar.gz"
    with (
        open(target, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb") as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        info = tarfile.TarInfo("b/huge.log")
        info.size = 64 * 1024**2
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    with pytest.raises(ArchiveError, match=r"says it holds 67108864 bytes"):
        read_archive(target, max_bytes=1024**2)


def test_too_many_members_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "many.zip"
    with zipfile.ZipFile(target, "w") as z:
        for n in range(12):
            z.writestr(f"b/{n}.log", "x\n")
    with pytest.raises(ArchiveError, match=r"more than 10 files"):
        read_archive(target, max_members=10)


def test_corrupt_archive_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cut.tar.gz"
    target.write_bytes(gzip.compress(b"not a tar at all" * 100)[:50])
    assert main(["analyze", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"logsleuth: error: {target}: not a readable tar archive")
    assert err.count("\n") == 1


def test_pack_refuses_an_empty_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["pack", str(tmp_path / "empty")]) == 2
    assert "empty: holds no file to pack" in capsys.readouterr().err


def test_pack_default_name_is_beside_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "run1"
    bundle.mkdir()
    (bundle / "launcher.log").write_text("x\n", encoding="utf-8")
    assert main(["pack", str(bundle)]) == 0
    assert (tmp_path / "run1.tar.gz").is_file()
    assert main(["pack", str(bundle)]) == 2
    assert "run1.tar.gz: exists" in capsys.readouterr().err


def test_an_archive_with_only_skipped_files_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "old.zip"
    with zipfile.ZipFile(target, "w") as z:
        z.writestr("b/diagnosis.json", "{}")
        z.writestr("b/teardown.log", "Traceback ...\n")
    assert main(["analyze", str(target)]) == 2
    assert capsys.readouterr().err == f"logsleuth: error: {target}: archive contains no files\n"


def test_too_many_directory_entries_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "dirs.tar"
    with tarfile.open(target, "w") as tar:
        for n in range(50):
            info = tarfile.TarInfo(f"b/d{n}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    with pytest.raises(ArchiveError, match=r"more than 40 entries"):
        read_archive(target, max_members=10)
