"""AMD GPUs: ``[accelerator] pytorch_rocm_arch``, kept as ``PYTORCH_ROCM_ARCH`` and the
``torchbake.rocm-arch`` label; ``/dev/kfd`` and ``/dev/dri`` with the host's groups of their nodes;
the host's GPUs from ``rocminfo``, each judged against the image's list."""

from __future__ import annotations

import re

from torchbake.core.errors import ContainerError
from torchbake.families import gpu_probe
from torchbake.families.family import ArchList, DeviceAccess, Family, HostDevices, HostGpu


def check_arch(value: str) -> None:
    if value and not all(re.fullmatch(r"gfx[0-9a-f]+", a) for a in value.split(";") if a):
        raise ValueError("expected gfx targets separated by ';', e.g. 'gfx90a;gfx942'")


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


def judge(gpu: HostGpu, label: str) -> gpu_probe.Judgement:
    return gpu_probe.judge_rocm(gpu.name, gpu.arch, [a for a in re.split(r"[;\s]+", label) if a])


ARCH = ArchList(setting="pytorch_rocm_arch", env="PYTORCH_ROCM_ARCH", label="torchbake.rocm-arch", check=check_arch,
                help="PYTORCH_ROCM_ARCH, kept as ENV in the image")
FAMILY = Family(check="rocm", arch=ARCH, nodes=("/dev/kfd", "/dev/dri", "/dev/dri/renderD*"), access=access,
                lister=("rocminfo",), parse_gpus=parse_gpus, judge=judge, probed=True)
