"""NVIDIA GPUs: ``[accelerator] torch_cuda_arch_list``, kept as ``TORCH_CUDA_ARCH_LIST`` and the
``torchbake.cuda-arch-list`` label, and what verify sees of it in torch; the NVIDIA Container
Toolkit and driver on the engine's host (``--gpus all``); the host's GPUs from ``nvidia-smi``,
each judged against the image's list."""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from typing import Any

from torchbake.core.errors import ContainerError
from torchbake.families import gpu_probe
from torchbake.families.family import FAIL, PASS, SKIP, ArchList, DeviceAccess, Family, HostDevices, HostGpu, Row

_ARCH = re.compile(r"^\d+\.\d+(\+PTX)?$")


def check_arch_list(value: str) -> None:
    if value and not all(_ARCH.match(a) for a in value.replace(" ", ";").split(";") if a):
        raise ValueError("expected compute capabilities separated by ';', e.g. '7.5;8.0;8.6;8.9;9.0+PTX'")


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


def judge(gpu: HostGpu, label: str) -> gpu_probe.Judgement:
    return gpu_probe.judge_cuda(gpu.name, tuple(int(p) for p in gpu.arch.split(".")), arch_list_of_label(label))


def verify_row(facts: Mapping[str, Any], arch_list: str) -> Row:
    """torch's compiled arch list in the image (from ``torch.cuda.get_arch_list()``, or its arch
    flags where no GPU is there) against the list it was built for."""
    wanted = [a for a in arch_list.replace(" ", ";").split(";") if a]
    if torch_error := facts.get("torch_error"):
        return "CUDA arch list", FAIL, f"torch does not import: {torch_error}"
    if not facts.get("cuda"):
        return "CUDA arch list", FAIL, f"torch {facts.get('torch')} is not a CUDA build"
    compiled = facts.get("arch_list") or (facts.get("arch_flags") or "").split()
    if not compiled:
        return "CUDA arch list", SKIP, "no GPU here and torch reports no arch flags"
    compiled_text = " ".join(compiled)
    missing = []
    for arch in wanted:
        number = arch.replace("+PTX", "").replace(".", "")
        if f"sm_{number}" not in compiled_text:
            missing.append(arch)
        if arch.endswith("+PTX") and f"compute_{number}" not in compiled_text:
            missing.append(arch)
    return ("CUDA arch list", FAIL if missing else PASS,
            f"missing {';'.join(missing)} in {compiled_text}" if missing else compiled_text)


ARCH = ArchList(setting="torch_cuda_arch_list", env="TORCH_CUDA_ARCH_LIST", label="torchbake.cuda-arch-list",
                check=check_arch_list, help="TORCH_CUDA_ARCH_LIST, kept as ENV in the image and checked by verify",
                per_platform="platform_arch_lists",
                per_platform_help="TORCH_CUDA_ARCH_LIST of another platform's image, where its torch wheel was built"
                                  ' for other GPUs, e.g. { "linux/arm64" = "8.0;9.0;10.0;11.0;12.0+PTX" } (PyTorch\'s'
                                  " CUDA 13 aarch64 wheels)",
                verify_flag="cuda_arch_list",
                verify_help="CUDA archs torch must be built for, e.g. 8.0;9.0. Default: the torchbake.cuda-arch-list"
                            " label)")
FAMILY = Family(check="nvidia", arch=ARCH, nodes=("/dev/nvidiactl", "/dev/nvidia[0-9]*"), access=access,
                lister=("nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"), parse_gpus=parse_gpus,
                judge=judge, verify_row=verify_row, probed=True)
