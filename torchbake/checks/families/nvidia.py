"""NVIDIA GPUs: the NVIDIA Container Toolkit and driver on the engine's host (``--gpus all``), the
host's GPUs from ``nvidia-smi``, and each judged against the image's ``TORCH_CUDA_ARCH_LIST``
(``torchbake.cuda-arch-list``)."""

from __future__ import annotations

import re
import shutil

from torchbake.adapters import command
from torchbake.checks import gpu_probe
from torchbake.checks.access import DeviceAccess, Family, HostDevices, HostGpu
from torchbake.core.errors import ContainerError


def access(profile: str, host: HostDevices) -> DeviceAccess:
    if "nvidia" not in host.runtimes and not (host.local and shutil.which("nvidia-container-runtime-hook")):
        raise ContainerError(
            f"The {profile} device profile needs the NVIDIA Container Toolkit on the engine's host, and"
            f" this engine has none (runtimes: {', '.join(host.runtimes) or 'none'}; no"
            " nvidia-container-runtime-hook). Install nvidia-container-toolkit and restart dockerd,"
            " or pass --device-profile cpu to run without GPUs."
        )
    if host.local and not host.has("/dev/nvidiactl"):
        raise ContainerError(
            f"The {profile} device profile needs an NVIDIA driver: /dev/nvidiactl does not exist on this host."
            " Check `nvidia-smi`, or pass --device-profile cpu to run without GPUs."
        )
    return DeviceAccess(gpus=True)


def arch_list_of_label(text: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST text ("8.0;9.0+PTX", spaces too) as torch.cuda.get_arch_list() spells
    it (["sm_80", "sm_90", "compute_90"])."""
    found = []
    for entry in re.split(r"[;\s]+", text.strip()):
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", entry)
        if match:
            found.append(f"sm_{match[1]}{match[2]}{match[3]}")
            if match[4]:
                found.append(f"compute_{match[1]}{match[2]}")
    return found


def parse_gpus(output: str) -> list[HostGpu]:
    """``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`` lines."""
    found = []
    for line in output.splitlines():
        name, _, capability = line.rpartition(",")
        if name.strip() and re.fullmatch(r"\d+\.\d+", capability.strip()):
            found.append(HostGpu(name.strip(), capability.strip()))
    return found


def gpus() -> list[HostGpu] | None:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    result = command.run([tool, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture=True, check=False,
                         echo=False, timeout=30)
    return parse_gpus(result.output) if result.returncode == 0 else None


def judge(gpu: HostGpu, label: str) -> gpu_probe.Judgement:
    return gpu_probe.judge_cuda(gpu.name, tuple(int(p) for p in gpu.arch.split(".")), arch_list_of_label(label))


FAMILY = Family(check="nvidia", nodes=("/dev/nvidiactl", "/dev/nvidia[0-9]*"), access=access, lister="nvidia-smi",
                gpus=gpus, arch_label="torchbake.cuda-arch-list", judge=judge)
