"""The GPU judgement from fact tables: what a torch's compiled arch list gives each GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchbake.checks import gpu_check
from torchbake.core.errors import ContainerError
from torchbake.families import gpu_probe, nvidia, rocm
from torchbake.families.family import HostGpu
from torchbake.families.gpu_probe import COMPATIBLE, NATIVE, NONE, PTX_ONLY, judge_cuda, judge_rocm

# torch 2.11.0+cu130 from PyPI, read on a real H100 (compute capability 9.0, driver 580)
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


# A one-kernel CUDA program built with nvcc for one target, run on a real H100 (9.0, driver 580,
# CUDA 13.0), 2026-11-25: what cudaDeviceSynchronize said.
H100_RUNS = {("sm_80",): "no kernel image is available for execution on the device",
             ("compute_80",): "no error", ("sm_86",): "no kernel image is available for execution on the device",
             ("sm_90",): "no error"}


@pytest.mark.parametrize(("arch_list", "said"), H100_RUNS.items())
def test_the_judgement_agrees_with_what_a_real_h100_did(arch_list, said):
    judged = judge_cuda("NVIDIA H100 80GB HBM3", (9, 0), list(arch_list))
    assert judged.passed == (said == "no error")
    if not judged.passed:
        assert said in judged.detail


def test_an_h100_has_native_kernels_in_the_cu130_wheel():
    judged = judge_cuda("NVIDIA H100 80GB HBM3", (9, 0), CU130)
    assert (judged.verdict, judged.passed, judged.fix) == (NATIVE, True, "")
    assert judged.device == "NVIDIA H100 80GB HBM3 (9.0)"


def test_an_l4_runs_the_sm_86_kernels_of_the_same_wheel_and_is_told_what_it_lacks():
    judged = judge_cuda("NVIDIA L4", (8, 9), CU130)
    assert (judged.verdict, judged.passed) == (COMPATIBLE, True)
    assert judged.detail.startswith("runs sm_86 kernels; no sm_89-specific ones")
    assert 'TORCH_CUDA_ARCH_LIST="7.5;8.0;8.6;8.9;9.0;10.0;12.0"' in judged.detail


def test_an_sm_120_gpu_has_no_kernels_in_a_list_that_ends_at_sm_90_and_is_told_the_fix():
    judged = judge_cuda("NVIDIA RTX PRO 6000", (12, 0), ["sm_80", "sm_86", "sm_90"])
    assert (judged.verdict, judged.passed) == (NONE, False)
    assert "no kernel image is available for execution on the device" in judged.detail and "sm_120" in judged.detail
    assert judged.fix == 'TORCH_CUDA_ARCH_LIST="8.0;8.6;9.0;12.0"'


@pytest.mark.parametrize("capability", [(9, 0), (12, 0)])
def test_ptx_alone_is_jit_compiled_at_first_use_a_pass_with_a_warning(capability):
    judged = judge_cuda("GPU", capability, ["compute_90"])
    assert (judged.verdict, judged.passed) == (PTX_ONLY, True)
    assert "JIT-compiled" in judged.detail and "compute_90" in judged.detail


def test_ptx_above_the_devices_capability_does_not_run_there():
    judged = judge_cuda("NVIDIA T4", (7, 5), ["sm_80", "compute_90"])
    assert judged.verdict == NONE and judged.fix == 'TORCH_CUDA_ARCH_LIST="7.5;8.0;9.0+PTX"'


def test_arch_specific_sass_runs_only_on_its_own_device():
    assert judge_cuda("H100", (9, 0), ["sm_90a"]).verdict == NATIVE
    assert judge_cuda("future", (9, 1), ["sm_90a"]).verdict == NONE
    assert judge_cuda("future", (9, 1), ["sm_90"]).verdict == COMPATIBLE


def test_rocm_gpus_run_only_their_own_gfx_target():
    native = judge_rocm("AMD Instinct MI250X", "gfx90a:sramecc+:xnack-", ["gfx90a"])
    assert (native.verdict, native.device) == (NATIVE, "AMD Instinct MI250X (gfx90a)")
    missing = judge_rocm("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", ["gfx90a"])
    assert (missing.verdict, missing.passed) == (NONE, False)
    assert missing.fix == 'PYTORCH_ROCM_ARCH="gfx90a;gfx942"' and "gfx942" in missing.detail


def test_the_probe_runs_as_a_module_and_says_when_no_gpu_can_be_judged():
    """`python -m torchbake.families.gpu_probe` against a Python without torch (this one): exit 2, and why."""
    result = subprocess.run([sys.executable, "-m", "torchbake.families.gpu_probe", "--table"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no GPU judged: torch does not import" in result.stdout
    assert result.stderr == ""  # nothing imported it before runpy ran it (a RuntimeWarning said so)


def test_the_probe_is_standard_library_and_torch_only():
    """It runs inside images, where torchbake is not installed: it imports nothing of torchbake's."""
    source = gpu_probe.__loader__.get_source(gpu_probe.__name__)
    assert "from ." not in source and "import torchbake" not in source


# --- the host's GPUs against an image's recorded arch list (run-container, before creating) ------

NVIDIA_SMI = "NVIDIA H100 80GB HBM3, 9.0\nNVIDIA L4, 8.9\n"
ROCMINFO = """*******
Agent 1
*******
  Name:                    AMD EPYC 9654 96-Core Processor
  Marketing Name:          AMD EPYC 9654 96-Core Processor
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx942
  Marketing Name:          AMD Instinct MI300X
  Device Type:             GPU
"""


def test_arch_list_labels_read_as_torch_spells_them():
    assert nvidia.arch_list_of_label("8.0;8.6 9.0+PTX") == ["sm_80", "sm_86", "sm_90", "compute_90"]
    assert nvidia.arch_list_of_label("9.0a;12.0") == ["sm_90a", "sm_120"]


def test_the_hosts_gpus_are_read_from_nvidia_smi_and_rocminfo():
    assert nvidia.parse_gpus(NVIDIA_SMI) == [HostGpu("NVIDIA H100 80GB HBM3", "9.0"),
                                                 HostGpu("NVIDIA L4", "8.9")]
    assert rocm.parse_gpus(ROCMINFO) == [HostGpu("AMD Instinct MI300X", "gfx942")]


def test_a_gpu_without_kernels_in_the_image_is_refused_naming_the_gpu_its_capability_and_the_list():
    gpus = [HostGpu("NVIDIA RTX PRO 6000", "12.0")]
    with pytest.raises(ContainerError) as raised:
        gpu_check.before_run("nvidia", "x/cuda:1", {"torchbake.cuda-arch-list": "8.0;9.0"}, gpus)
    text = str(raised.value)
    assert "x/cuda:1 has no kernels for 1 GPU(s) of this host (the image's arch list: 8.0;9.0)" in text
    assert "NVIDIA RTX PRO 6000 (12.0)" in text and 'TORCH_CUDA_ARCH_LIST="8.0;9.0;12.0"' in text
    assert "--no-gpu-check" in text


def test_a_compatible_or_ptx_only_gpu_is_one_line_of_warning_and_a_native_one_says_nothing():
    labels = {"torchbake.cuda-arch-list": "8.6;9.0"}
    notes = gpu_check.before_run("nvidia", "x/cuda:1", labels, nvidia.parse_gpus(NVIDIA_SMI))
    assert notes == [notes[0]] and notes[0].startswith("warning: NVIDIA L4 (8.9): compatible: runs sm_86 kernels")
    assert gpu_check.before_run("rocm", "x/rocm:1", {"torchbake.rocm-arch": "gfx90a;gfx942"},
                                rocm.parse_gpus(ROCMINFO)) == []
    with pytest.raises(ContainerError, match=r'AMD Instinct MI300X \(gfx942\).*PYTORCH_ROCM_ARCH="gfx90a;gfx942"'):
        gpu_check.before_run("rocm", "x/rocm:1", {"torchbake.rocm-arch": "gfx90a"}, rocm.parse_gpus(ROCMINFO))


def test_what_cannot_be_compared_is_said_not_passed():
    assert "could not be listed" in gpu_check.before_run("nvidia", "x:1", {"torchbake.cuda-arch-list": "9.0"}, None)[0]
    assert "records no arch list" in gpu_check.before_run("nvidia", "x:1", {}, [HostGpu("H100", "9.0")])[0]


# PyTorch's CUDA 13.0 aarch64 (SBSA) wheels: TORCH_CUDA_ARCH_LIST "8.0;9.0;10.0;11.0;12.0+PTX"
# (pytorch .ci/aarch64_linux/aarch64_wheel_ci_build.py's CUDA 13 list), as get_arch_list() says it.
CU130_AARCH64 = ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"]


@pytest.mark.parametrize(("gpu", "capability", "verdict", "runs"), [
    ("NVIDIA GH200 480GB", (9, 0), NATIVE, "sm_90"),  # Grace Hopper
    ("NVIDIA GB200", (10, 0), NATIVE, "sm_100"),  # Grace Blackwell
    ("NVIDIA GB300", (10, 3), COMPATIBLE, "sm_100"),  # Blackwell Ultra
    ("NVIDIA GB10", (12, 1), COMPATIBLE, "sm_120"),  # DGX Spark
    ("NVIDIA Thor", (11, 0), NATIVE, "sm_110"),  # Jetson AGX Thor (CUDA 13 numbers it 11.0; CUDA 12.8/12.9 said 10.1)
    ("Orin", (8, 7), COMPATIBLE, "sm_80"),  # Jetson AGX Orin
])
def test_the_arm64_gpus_against_the_aarch64_cu130_wheel(gpu, capability, verdict, runs):
    judged = judge_cuda(gpu, capability, CU130_AARCH64)
    assert (judged.verdict, judged.passed) == (verdict, True)
    assert runs in judged.detail
