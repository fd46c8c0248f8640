"""The GPUs of this host against an image's kernels: ``run-container`` looks before it creates a
container, and ``verify --gpus`` runs the probe (:mod:`torchbake.checks.gpu_probe`) in the image with the
profile's device access.

The host's GPUs come from ``nvidia-smi --query-gpu=name,compute_cap`` (CUDA) or ``rocminfo``
(ROCm); the image's kernels from its recorded arch list (the ``torchbake.cuda-arch-list`` and
``torchbake.rocm-arch`` labels); the judgement is the probe's own (native, compatible, PTX only,
none).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from torchbake.adapters import command
from torchbake.checks import gpu_probe
from torchbake.core.errors import ContainerError

CUDA_LABEL, ROCM_LABEL = "torchbake.cuda-arch-list", "torchbake.rocm-arch"


def probe_source() -> str:
    """The probe's own text, which the verify container runs (torchbake is not in the image)."""
    return Path(gpu_probe.__file__).read_text()


@dataclass(frozen=True)
class HostGpu:
    name: str
    arch: str  # "9.0" (compute capability) or "gfx942" (gcnArchName)


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


def nvidia_gpus(output: str) -> list[HostGpu]:
    """``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`` lines."""
    found = []
    for line in output.splitlines():
        name, _, capability = line.rpartition(",")
        if name.strip() and re.fullmatch(r"\d+\.\d+", capability.strip()):
            found.append(HostGpu(name.strip(), capability.strip()))
    return found


def rocm_gpus(output: str) -> list[HostGpu]:
    """``rocminfo``'s GPU agents: their marketing name and gfx target."""
    found = []
    for agent in output.split("*******")[1:]:
        fields = dict(re.findall(r"^\s*([A-Za-z ]+?):\s+(.*?)\s*$", agent, re.MULTILINE))
        if fields.get("Device Type") == "GPU" and fields.get("Name", "").startswith("gfx"):
            found.append(HostGpu(fields.get("Marketing Name") or fields["Name"], fields["Name"]))
    return found


def host_gpus(check: str) -> list[HostGpu] | None:
    """The GPUs of this host for a profile's built-in ``check`` ("nvidia" or "rocm"); None when
    the tool that lists them is not installed."""
    if check == "nvidia":
        tool = shutil.which("nvidia-smi")
        argv = [tool, "--query-gpu=name,compute_cap", "--format=csv,noheader"] if tool else None
        parse = nvidia_gpus
    elif check == "rocm":
        tool = shutil.which("rocminfo")
        argv, parse = ([tool] if tool else None), rocm_gpus
    else:
        return None
    if argv is None:
        return None
    result = command.run(argv, capture=True, check=False, echo=False, timeout=30)
    return parse(result.output) if result.returncode == 0 else None


def judge(check: str, gpus: list[HostGpu], labels: Mapping[str, str]) -> list[gpu_probe.Judgement]:
    """Each host GPU judged against the image's recorded arch list ([] when it records none)."""
    if check == "nvidia" and labels.get(CUDA_LABEL):
        arch_list = arch_list_of_label(labels[CUDA_LABEL])
        return [gpu_probe.judge_cuda(gpu.name, tuple(int(p) for p in gpu.arch.split(".")), arch_list) for gpu in gpus]
    if check == "rocm" and labels.get(ROCM_LABEL):
        arch_list = [a for a in re.split(r"[;\s]+", labels[ROCM_LABEL]) if a]
        return [gpu_probe.judge_rocm(gpu.name, gpu.arch, arch_list) for gpu in gpus]
    return []


def before_run(check: str, image: str, labels: Mapping[str, str], gpus: list[HostGpu] | None) -> list[str]:
    """Notes for the user (a compatible or PTX-only match, one line each; what could not be
    compared); a ContainerError when a GPU has no kernels in the image, naming it, its capability
    and the image's list, before anything is created."""
    label = CUDA_LABEL if check == "nvidia" else ROCM_LABEL
    if gpus is None:
        return [f"GPU check: the host's GPUs could not be listed ({'nvidia-smi' if check == 'nvidia' else 'rocminfo'}"
                " is not installed or failed); the container starts without it."]
    if not labels.get(label):
        return [f"GPU check: {image} records no arch list ({label}), so its kernels were not compared with this"
                " host's GPUs."]
    notes, missing = [], []
    for judged in judge(check, gpus, labels):
        if judged.verdict == gpu_probe.NONE:
            missing.append(judged)
        elif judged.verdict != gpu_probe.NATIVE:
            notes.append(f"warning: {judged.device}: {judged.verdict}: {judged.detail}")
    if missing:
        lines = "\n".join(f"  {j.device}: {j.detail}. Rebuild with {j.fix}." for j in missing)
        raise ContainerError(f"{image} has no kernels for {len(missing)} GPU(s) of this host (the image's arch list:"
                             f" {labels[label]}):\n{lines}\nPass --no-gpu-check to start the container anyway.")
    return notes
