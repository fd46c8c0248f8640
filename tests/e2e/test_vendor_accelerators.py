"""The bundled Ascend NPU, Google TPU and Intel XPU profiles end to end: `invoke build --release
--config NAME` builds and verifies each on this machine, with stand-ins for what does not install
here (torch_npu, torch_xla and libtpu wheels, CANN's .run installer: the same shapes, the same
names), the verify table saying what only the device proves; and `run-container` names what a
host without the device lacks (exit 8), and plans the vendor's documented device access once the
host has it (device nodes and the driver folder made for the test, removed after)."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import run_invoke

from .helpers import STAND_IN_PYTHON, docker, http_server, labels, make_wheel, sha256_of

CANN = """#!/bin/bash
# A stand-in for Ascend-cann-toolkit_VERSION_linux-x86_64.run: installs where CANN does.
set -e
[ "$1 $2" = "--install --quiet" ] || { echo "usage: $0 --install --quiet" >&2; exit 2; }
mkdir -p /usr/local/Ascend/ascend-toolkit/latest/lib64
echo "version=8.0.0" > /usr/local/Ascend/ascend-toolkit/latest/version.cfg
"""

# name → (host paths the container needs, what `run-container --dry-run` plans with them)
DEVICES = {
    "ascend": (["/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/usr/local/Ascend/driver/"],
               "--device /dev/davinci0 --device /dev/davinci_manager --device /dev/devmm_svm --device /dev/hisi_hdc"
               " --mount type=bind,source=/usr/local/Ascend/driver,target=/usr/local/Ascend/driver,readonly"),
    "tpu": (["/dev/vfio/"], "--privileged --env PJRT_DEVICE=TPU"),
    "xpu": (["/dev/dri/", "/dev/dri/renderD128"], "--device /dev/dri --group-add 44"),
}
LACKING = {"ascend": "The ascend device profile needs /dev/davinci[0-9]* and /dev/davinci_manager and /dev/devmm_svm"
                     " and /dev/hisi_hdc and /usr/local/Ascend/driver on this host",
           "tpu": "The tpu device profile needs a Google TPU (a Cloud TPU VM): this host has no /dev/accel* or /dev/vfio",
           "xpu": "The xpu device profile needs /dev/dri on this host, which does not exist."}


def stand_ins(name: str, www: Path, url: str, tiny_torch: Path) -> tuple[list[str], str]:
    """The flags that give the profile its wheels (and CANN), and the config lines of the rest."""
    def pinned(path: Path) -> str:
        return f"{url}/{path.name}#sha256={sha256_of(path)}"

    shutil.copy(tiny_torch, www / tiny_torch.name)
    torch = ["--torch-whl-url", pinned(www / tiny_torch.name)]
    if name == "ascend":
        npu = make_wheel(www, "torch-npu", "2.13.0", ["torch"], {"torch_npu/__init__.py": (
            "import os, torch\n"  # CANN's files where the profile's ENV says they are, as torch_npu needs them
            "assert os.path.isfile(os.environ['ASCEND_TOOLKIT_HOME'] + '/version.cfg')\n")})
        (www / "Ascend-cann-toolkit_8.0.0_linux-x86_64.run").write_text(CANN)
        return [*torch, "--extension-whl-url", pinned(npu),
                "--cann-toolkit-url", pinned(www / "Ascend-cann-toolkit_8.0.0_linux-x86_64.run")], ""
    if name == "tpu":
        make_wheel(www, "libtpu", "0.0.99", [], {"libtpu/__init__.py": ""})  # not the index's 0.0.52
        xla = make_wheel(www, "torch-xla", "2.13.0", ["torch", "libtpu"], {"torch_xla/__init__.py": (
            "import os, torch, libtpu\nassert os.environ['PJRT_DEVICE'] == 'TPU'\n")})
        return [*torch, "--extension-whl-url", pinned(xla)], f'[wheels]\nextra = ["libtpu==0.0.99"]\nfind_links = ["{www}"]\n'
    return torch, ""


@pytest.mark.parametrize("name", ["ascend", "tpu", "xpu"])
def test_a_vendor_profile_builds_verifies_and_plans_its_devices(name, base_image, tb_env, tmp_path, run_id, tiny_torch):
    www = tmp_path / "www"
    www.mkdir()
    image = f"torchbake-test/{name}:{run_id}"
    own = tmp_path / "own.toml"
    with http_server(www) as url:
        flags, lines = stand_ins(name, www, url, tiny_torch)
        own.write_text(STAND_IN_PYTHON + lines)
        result = run_invoke("build", "--release", "--config", name, "--config", str(own), "--name", image.split(":")[0],
                            "--tag", run_id, "--base-img", base_image, *flags, env=tb_env)
    try:
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-5000:]
        assert labels(image)["torchbake.profile"] == name
        module = {"ascend": "torch_npu", "tpu": "torch_xla", "xpu": ""}[name]
        if module:
            assert re.search(rf"{module} imports\s*│\s*pass", output), output[-3000:]
        assert re.search(r"on the device\s*│\s*skip\s*│\s*not proven here: ", output), output[-3000:]

        made: list[Path] = []
        run = ("run-container", image, "--rm", "--command", "true", "--dry-run")
        paths, planned_flags = DEVICES[name]
        assert not [p for p in paths if Path(p).exists()], "this host has the device: the test makes its own"
        lacking = run_invoke(*run, env=tb_env)
        assert lacking.returncode == 8, lacking.stdout + lacking.stderr
        assert LACKING[name] in " ".join(lacking.stderr.split()), lacking.stderr
        try:
            for path in paths:
                if path.endswith("/"):
                    Path(path).mkdir(parents=True)
                else:
                    os.mknod(path, 0o660 | stat.S_IFCHR, os.makedev(1, 3))
                    os.chown(path, 0, 44)  # the video group's number
                made.append(Path(path))
            planned = run_invoke(*run, env=tb_env)
            if name == "ascend":  # Huawei's docs mount the driver folder by hand: the profile does, once
                twice = run_invoke(*run, "--mount", "/usr/local/Ascend/driver:/usr/local/Ascend/driver", env=tb_env)
                assert twice.returncode == 2, twice.stdout + twice.stderr
                assert ("The mount at /usr/local/Ascend/driver (--mount or run.mounts) is one the ascend device"
                        " profile already makes") in " ".join(twice.stderr.split()), twice.stderr
        finally:
            for path in reversed(made):
                path.rmdir() if path.is_dir() and not path.is_char_device() else path.unlink()
            for parent in ("/usr/local/Ascend/driver", "/usr/local/Ascend"):
                if name == "ascend" and Path(parent).is_dir() and not any(Path(parent).iterdir()):
                    Path(parent).rmdir()
        assert planned.returncode == 0, planned.stdout + planned.stderr
        assert planned_flags in planned.stdout, planned.stdout
    finally:
        docker("image", "rm", "--force", image, check=False)
