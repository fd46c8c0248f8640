"""How a release's wheels are split into layers (torch's closure alone, then what the extension
and the companions add), and the image's creation time."""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from torchbake.building import input_hash
from torchbake.core import build_time
from torchbake.core.errors import ConfigurationError
from torchbake.housekeeping import cleanup
from torchbake.inputs import wheelhouse
from torchbake.planning.config import resolve
from torchbake.variants.release import plan as plan_release


def wheel(folder, name, version, *requires):
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                    + "".join(f"Requires-Dist: {r}\n" for r in requires))
    return path


def test_torchs_closure_follows_requirements_and_markers_for_the_image(tmp_path):
    wheel(tmp_path, "torch", "2.13.0", "filelock", "sympy>=1.13", "typing-extensions; python_version >= '3.9'",
          "colorama; sys_platform == 'win32'", "opt-einsum; extra == 'opt'", "networkx")
    wheel(tmp_path, "sympy", "1.14", "mpmath<1.4")
    for name in ("filelock", "mpmath", "typing-extensions", "networkx", "numpy", "colorama", "pyyaml"):
        wheel(tmp_path, name, "1.0")
    wheel(tmp_path, "torch-musa", "2.0.0", "torch==2.13.0", "pyyaml")
    resolved = wheelhouse.wheels_in(tmp_path)
    torch = wheelhouse.dependency_closure(resolved, ["torch"], "3.11", ["manylinux_2_28_x86_64"])
    assert torch == {"torch", "filelock", "sympy", "mpmath", "typing-extensions", "networkx"}
    extension = wheelhouse.dependency_closure(resolved, ["torch_musa"], "3.11", ["manylinux_2_28_x86_64"]) - torch
    assert extension == {"torch-musa", "pyyaml"}  # numpy and colorama are the companions' (or no one's)


def test_every_build_writes_source_date_epoch_and_the_created_label_only_when_it_is_given(tmp_path, monkeypatch):
    settings = resolve([], {}, {"paths.cache_dir": str(tmp_path), "build.variant": "release"}).settings()
    plan = plan_release(settings)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert input_hash.build_args(plan)["SOURCE_DATE_EPOCH"] == "0"  # never the moment of the build
    assert build_time.created_time() == ""
    input_hash.note_first_built(plan.path_options.cache_dir, "a" * 64)
    first = json.loads((tmp_path / "first-built.json").read_text())
    input_hash.note_first_built(plan.path_options.cache_dir, "a" * 64)
    assert json.loads((tmp_path / "first-built.json").read_text()) == first  # the first build's, later too
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert input_hash.build_args(plan)["SOURCE_DATE_EPOCH"] == "1700000000"
    assert build_time.created_time() == "2023-11-14T22:13:20Z"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ConfigurationError, match="SOURCE_DATE_EPOCH='yesterday' is not a number of seconds"):
        build_time.source_date_epoch()


@pytest.mark.parametrize(("name", "content", "message"), [
    ("ext-1.0-py3-none-any.whl", b"<!DOCTYPE html><html><body>Sign in</body></html>",
     "wheels.extension = https://files.example/ext: what it gives is not a wheel: ext-1.0-py3-none-any.whl is an HTML page"),
    ("ext-1.0-py3-none-any.whl", b"just text\n", "ext-1.0-py3-none-any.whl is not a zip archive"),
    ("download", b"PK", "the file it gives, 'download', is not named as a wheel"),
])
def test_a_download_that_is_not_a_wheel_names_the_option_and_the_url(tmp_path, name, content, message):
    from torchbake.core.errors import DownloadError
    from torchbake.inputs.wheelhouse import check_wheel
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DownloadError) as caught:
        check_wheel(path, "https://files.example/ext", "wheels.extension")
    assert message in str(caught.value)
    assert DownloadError.exit_code == 3


def test_a_real_wheel_passes_the_check(tmp_path):
    import zipfile

    from torchbake.inputs.wheelhouse import check_wheel
    path = tmp_path / "ext-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("ext-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    check_wheel(path, "https://files.example/ext-1.0-py3-none-any.whl", "wheels.extension")


PLATFORMS = ["manylinux_2_28_x86_64"]


def tagged(folder, name, version, tag, *requires):
    """A wheel like wheel() under another tag (``cp311-cp311-manylinux_2_17_x86_64``)."""
    path = wheel(folder, name, version, *requires)
    return path.rename(path.with_name(path.name.replace("py3-none-any", tag)))


def test_pins_and_wheel_files_already_in_the_wheelhouse_need_no_pip(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    tagged(house, "uv", "0.13.9", "py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64")
    mine = wheel(tmp_path, "torch", "2.13.0+tiny")
    (house / mine.name).write_bytes(mine.read_bytes())
    assert wheelhouse.already_resolved(["uv==0.13.9", str(mine)], house, "3.11", PLATFORMS) == [
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "torch-2.13.0+tiny-py3-none-any.whl"]
    assert wheelhouse.already_resolved(["torch==2.13.0"], house, "3.11", PLATFORMS) == [mine.name]  # a local label matches


@pytest.mark.parametrize(("requirements", "why"), [
    (["uv"], "not pinned: an index may have a newer one"),
    (["uv>=0.13"], "a range"),
    (["uv==0.13.*"], "a wildcard"),
    (["uv[extra]==0.13.9"], "extras"),
    (["uv==0.13.9; python_version > '3'"], "a marker"),
    (["uv==0.14.0"], "no such version here"),
    (["numpy==2.0"], "needs something else"),
    (["old==1.0"], "only a wheel the image cannot install (cp39)"),
    (["twice==1.0"], "two candidates: pip chooses"),
    (["not a requirement"], "does not parse"),
    ([], "nothing asked"),
])
def test_pip_resolves_whenever_the_wheelhouse_alone_cannot_answer(tmp_path, requirements, why):
    wheel(tmp_path, "uv", "0.13.9")
    wheel(tmp_path, "numpy", "2.0", "numpy-helper; python_version >= '3.9'")
    tagged(tmp_path, "old", "1.0", "cp39-cp39-manylinux_2_17_x86_64")
    tagged(tmp_path, "twice", "1.0", "cp311-cp311-manylinux_2_17_x86_64")
    wheel(tmp_path, "twice", "1.0")
    assert wheelhouse.already_resolved(requirements, tmp_path, "3.11", PLATFORMS) is None, why


def test_a_wheel_file_that_differs_from_the_wheelhouse_copy_goes_to_pip(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    mine = wheel(tmp_path, "torch", "2.13.0+tiny")
    (house / mine.name).write_bytes(mine.read_bytes() + b"\0")
    assert wheelhouse.already_resolved([str(mine)], house, "3.11", PLATFORMS) is None
    (house / mine.name).unlink()
    assert wheelhouse.already_resolved([str(mine)], house, "3.11", PLATFORMS) is None


def test_resolve_runs_pip_only_when_the_wheelhouse_cannot_answer(tmp_path, monkeypatch):
    house, context = tmp_path / "house", tmp_path / "context"
    house.mkdir()
    wheel(house, "uv", "0.13.9")
    ran = []

    def pip(argv, cache_dir, *_args):
        ran.append(argv)
        wheel(cache_dir, "uv", "0.14.0")
        return type("Result", (), {"output": f"Saved {cache_dir}/uv-0.14.0-py3-none-any.whl\n"})()

    monkeypatch.setattr(wheelhouse, "_pip_download", pip)
    options = SimpleNamespace(platforms=tuple(PLATFORMS), index_url="", extra_index_urls=(), find_links=())
    log = tmp_path / "build.log"
    found = wheelhouse.resolve(["uv==0.13.9"], house, "3.11", options, link_into=context, log_file=log)
    assert [w.path.name for w in found] == ["uv-0.13.9-py3-none-any.whl"] and ran == []
    assert "uv==0.13.9 is uv-0.13.9-py3-none-any.whl, already there and needing nothing else (pip not run)" in log.read_text()
    found = wheelhouse.resolve(["uv>=0.14"], house, "3.11", options, link_into=tmp_path / "context2")
    assert [w.path.name for w in found] == ["uv-0.14.0-py3-none-any.whl"] and len(ran) == 1


def test_an_index_behind_an_intercepting_proxy_answers_when_its_ca_is_trusted_as_pip_is_told(tmp_path):
    """The probe of the indexes trusts what pip is told to trust (PIP_CERT, set for a build's commands
    from --ca-bundle): an https index signed by that CA answers; a port nothing listens on does not."""
    import socket
    from types import SimpleNamespace

    from tests.support import flaky_server, make_test_ca
    from torchbake.adapters import command
    from torchbake.inputs.wheelhouse import unanswered_indexes

    ca, cert, key = make_test_ca(tmp_path / "ca")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/simple"
    with flaky_server(b"index", ["404"] * 10, tls=(cert, key)) as (url, _seen):
        index = "https://" + url.split("://", 1)[1].split("/", 1)[0] + "/simple"
        options = SimpleNamespace(index_url=index, extra_index_urls=[dead])  # the two it reads
        untrusted = unanswered_indexes(options, timeout=5)
        assert [line.split(" ")[0] for line in untrusted] == [index, dead]  # the CA is not the host's
        with command.environment({"PIP_CERT": str(ca)}):
            assert [line.split(" ")[0] for line in unanswered_indexes(options, timeout=5)] == [dead]


def _uv_like_wheel(folder: Path, program: bytes) -> Path:
    wheel = folder / "uv-9.9-py3-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("uv-9.9.data/scripts/uv", program)
        archive.writestr("uv-9.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: uv\nVersion: 9.9\n")
    return wheel


def test_a_wheels_program_is_unpacked_once_and_again_only_when_its_kept_bytes_are_not_the_wheels(tmp_path):
    tools = tmp_path / "tools"
    wheel = _uv_like_wheel(tmp_path, b"#!/bin/sh\necho uv\n" * 100)
    kept = wheelhouse.kept_script(wheel, "uv", tools)
    assert kept.read_bytes() == b"#!/bin/sh\necho uv\n" * 100 and kept.stat().st_mode & 0o111
    inode = kept.stat().st_ino
    assert wheelhouse.kept_script(wheel, "uv", tools).stat().st_ino == inode  # read from the cache, not unpacked
    kept.write_bytes(b"#!/bin/sh\necho uv\n" * 99)  # cut short
    assert wheelhouse.kept_script(wheel, "uv", tools).read_bytes() == b"#!/bin/sh\necho uv\n" * 100
    kept.write_bytes(b"#!/bin/sh\necho vu\n" * 100)  # same size, other bytes
    assert wheelhouse.kept_script(wheel, "uv", tools).read_bytes() == b"#!/bin/sh\necho uv\n" * 100
    (tmp_path / "other").mkdir()
    other = wheelhouse.kept_script(_uv_like_wheel(tmp_path / "other", b"new uv"), "uv", tools)  # same name, new bytes
    assert other.read_bytes() == b"new uv" and sorted(tools.iterdir()) == sorted([kept, other])  # a file of its own
    assert [(kind, str(path)) for kind, path, _ in cleanup._entries(tmp_path) if kind == "program"] == [
        ("program", str(p)) for p in sorted(tools.iterdir())]  # each one `invoke gc` may remove


def test_cells_side_by_side_unpack_one_program_without_tripping_on_each_other(tmp_path):
    """build-all's cells run in threads of one process: each unpacks into a file of its own and
    renames it into place (a name of the process's alone: one cell's rename took the other's file,
    "internal error: FileNotFoundError")."""
    import threading

    program = os.urandom(1 << 20) * 8
    wheel = _uv_like_wheel(tmp_path, program)
    start, found, failed = threading.Barrier(6), [], []

    def unpack():
        start.wait()
        try:
            found.append(wheelhouse.kept_script(wheel, "uv", tmp_path / "tools").read_bytes() == program)
        except OSError as exc:
            failed.append(exc)

    threads = [threading.Thread(target=unpack) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == [] and found == [True] * 6
    assert [p.name for p in (tmp_path / "tools").iterdir()] == [f"uv-{len(program)}-{zlib.crc32(program):08x}"]
