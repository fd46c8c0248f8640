"""The GPUs of this host against an image's kernels: ``run-container`` looks before it creates a
container, and ``verify --gpus`` runs the probe (:mod:`torchbake.families.gpu_probe`) in the image with the
profile's device access.

The host's GPUs and the image's recorded arch list are the profile's family's
(:mod:`torchbake.families`: ``nvidia-smi`` against ``torchbake.cuda-arch-list``, ``rocminfo``
against ``torchbake.rocm-arch``); the judgement is the probe's own (native, compatible, PTX only,
none).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from torchbake.adapters import command
from torchbake.core.errors import ContainerError
from torchbake.families import FAMILIES, gpu_probe
from torchbake.families.family import HostGpu


def probe_source() -> str:
    """The probe's own text, which the verify container runs (torchbake is not in the image)."""
    return Path(gpu_probe.__file__).read_text()


def host_gpus(check: str) -> list[HostGpu] | None:
    """The host's GPUs as the ``check`` family's lister sees them (None: it is missing or failed)."""
    family = FAMILIES[check]
    tool = shutil.which(family.lister[0])
    if tool is None:
        return None
    result = command.run([tool, *family.lister[1:]], capture=True, check=False, echo=False, timeout=30)
    return family.parse_gpus(result.output) if result.returncode == 0 else None


def judge(check: str, gpus: list[HostGpu], labels: Mapping[str, str]) -> list[gpu_probe.Judgement]:
    """Each host GPU judged against the image's recorded arch list ([] when it records none)."""
    family = FAMILIES[check]
    label = labels.get(family.arch.label)
    return [family.judge(gpu, label) for gpu in gpus] if label else []


def before_run(check: str, image: str, labels: Mapping[str, str], gpus: list[HostGpu] | None) -> list[str]:
    """Notes for the user (a compatible or PTX-only match, one line each; what could not be
    compared); a ContainerError when a GPU has no kernels in the image, naming it, its capability
    and the image's list, before anything is created."""
    family = FAMILIES[check]
    label = family.arch.label
    if gpus is None:
        return [f"GPU check: the host's GPUs could not be listed ({family.lister[0]}"
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
