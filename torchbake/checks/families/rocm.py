"""AMD GPUs: ``/dev/kfd`` and ``/dev/dri`` with the host's groups of their nodes, the host's GPUs
from ``rocminfo``, and each judged against the image's ``PYTORCH_ROCM_ARCH``
(``torchbake.rocm-arch``)."""

from __future__ import annotations

import re
import shutil

from torchbake.adapters import command
from torchbake.checks import gpu_probe
from torchbake.checks.access import DeviceAccess, Family, HostDevices, HostGpu
from torchbake.core.errors import ContainerError


def access(profile: str, host: HostDevices) -> DeviceAccess:
    nodes = ("/dev/kfd", "/dev/dri")
    if not host.local:
        return DeviceAccess(devices=nodes, group_add=("video", "render"))
    missing = [node for node in nodes if node not in host.nodes]
    if missing:
        raise ContainerError(
            f"The {profile} device profile needs {' and '.join(missing)} on this host, which "
            f"{'do' if len(missing) > 1 else 'does'} not exist (the amdgpu driver with ROCm support"
            " makes them). Pass --device-profile cpu to run without GPUs."
        )
    groups = sorted({gid for node, gid in host.nodes.items() if node == "/dev/kfd" or node.startswith("/dev/dri/renderD")})
    return DeviceAccess(devices=nodes, security_opt=("seccomp=unconfined",), group_add=tuple(map(str, groups)))


def parse_gpus(output: str) -> list[HostGpu]:
    """``rocminfo``'s GPU agents: their marketing name and gfx target."""
    found = []
    for agent in output.split("*******")[1:]:
        fields = dict(re.findall(r"^\s*([A-Za-z ]+?):\s+(.*?)\s*$", agent, re.MULTILINE))
        if fields.get("Device Type") == "GPU" and fields.get("Name", "").startswith("gfx"):
            found.append(HostGpu(fields.get("Marketing Name") or fields["Name"], fields["Name"]))
    return found


def gpus() -> list[HostGpu] | None:
    tool = shutil.which("rocminfo")
    if tool is None:
        return None
    result = command.run([tool], capture=True, check=False, echo=False, timeout=30)
    return parse_gpus(result.output) if result.returncode == 0 else None


def judge(gpu: HostGpu, label: str) -> gpu_probe.Judgement:
    return gpu_probe.judge_rocm(gpu.name, gpu.arch, [a for a in re.split(r"[;\s]+", label) if a])


FAMILY = Family(check="rocm", nodes=("/dev/kfd", "/dev/dri", "/dev/dri/renderD*"), access=access, lister="rocminfo",
                gpus=gpus, arch_label="torchbake.rocm-arch", judge=judge)
