"""Issue 13 against the real engine: torch shipped once (a toolkit adds only layers above it).
(uv and pip keep torch pinned in derived images: test_release's derived-image test. A sibling
with one more companion and another extension shares torch's layer and every layer below it,
adding about its own bytes: test_release's diff test, which builds that sibling anyway.)"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.conftest import run_invoke

from .helpers import docker, file_in_image, new_layer_bytes, torch_layer

MB = 1 << 20


@pytest.fixture
def cpu(cpu_image):
    name, result = cpu_image
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    return name


def sibling(tmp_path, base_image, tb_env, tag: str, config: str, *flags: str):
    extra = tmp_path / f"{tag}.toml"
    extra.write_text(config)
    name = f"torchbake-test/pytorch-cpu:{tag}"
    result = run_invoke("build", "--config", "configs/cpu.toml", "--config", str(extra), "--name",
                        "torchbake-test/pytorch-cpu", "--tag", tag, "--base-img", base_image, *flags, env=tb_env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return name


def test_a_toolkit_adds_only_layers_above_torch(base_image, tb_env, tmp_path, run_id, cpu):
    """The CPU image with a vendor toolkit (by URL, as MUSA's) shares torch's layer and every layer
    below it with the image without one: a toolkit, added or changed, builds only above torch.
    (A changed extension wheel: test_release's diff of two builds; an unchanged build and --force:
    test_reproducible.)"""
    tarball = toolkit(tmp_path / "musa_toolkits-3.2.tar.gz", "3.2")
    # --no-verify: what is asserted is the layers and the toolkit's bytes (the CPU image's verify: test_release)
    name = sibling(tmp_path, base_image, tb_env, f"{run_id}-kit3.2", f'[toolkits]\nmusa_toolkits_url = "{tarball}"\n',
                   "--no-verify")
    try:
        shared, added = new_layer_bytes(name, cpu)
        assert shared > torch_layer(cpu), (shared, torch_layer(cpu))
        assert added <= 5 * MB, added
        assert file_in_image(name, "/usr/local/musa/version.txt") == "fake toolkit 3.2\n"
        print(f"toolkit: {added} new layer bytes")
        # Another toolkit under the same file name, size and modification time (new bytes only): the
        # image holds its bytes, although buildx would keep a reused context copy's file of that size and time.
        other = same_size_toolkit(tarball, tmp_path / "other")
        again = sibling(tmp_path, base_image, tb_env, f"{run_id}-kit3.2b", f'[toolkits]\nmusa_toolkits_url = "{other}"\n',
                        "--no-verify")
        try:
            assert file_in_image(again, "/usr/local/musa/version.txt") == "fake toolkit 3.3\n"
        finally:
            docker("image", "rm", "--force", again, check=False)
    finally:
        docker("image", "rm", "--force", name, check=False)


def toolkit(path: Path, version: str) -> Path:
    """A fake vendor toolkit tarball whose size does not depend on its version's digits (gzip
    stores the tar's fixed-size records as they are)."""
    import gzip
    import io

    path.parent.mkdir(parents=True, exist_ok=True)
    script = ("#!/bin/bash\nset -e\nmkdir -p /usr/local/musa\n"
              f"echo 'fake toolkit {version}' > /usr/local/musa/version.txt\n").encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("musa_toolkits/install.sh")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    path.write_bytes(gzip.compress(raw.getvalue(), compresslevel=0, mtime=0))
    return path


def same_size_toolkit(first: Path, folder: Path) -> Path:
    """``first``'s toolkit saying 3.3: a tarball of ``first``'s name, size and modification time."""
    import os

    other = toolkit(folder / first.name, "3.3")
    assert other.stat().st_size == first.stat().st_size and other.read_bytes() != first.read_bytes()
    os.utime(other, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns))
    return other
