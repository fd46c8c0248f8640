"""Does this torch have kernels for the GPUs it meets? One probe, one judgement per GPU.

For each GPU torch can see: its name and compute capability (on ROCm its ``gcnArchName``),
torch's compiled arch list, and a small real workload (a matmul and a convolution in fp32, and in
bf16/fp16 where the device supports them, each checked against the CPU's result). Each GPU is
judged against the arch list:

- native: its exact SASS (``sm_XY``, ROCm: its ``gfx…``) is there: pass;
- compatible: SASS of the same major, lower minor (CUDA runs ``X.y`` code on any ``X.z``, z ≥ y):
  pass, naming the kernels it runs on and what it lacks;
- PTX only: a ``compute_XY`` at or below its capability, JIT-compiled at first use: pass with a
  warning (a slow first start);
- none: fail, with the error users know ("no kernel image is available for execution on the
  device", sm_XY) and the ``TORCH_CUDA_ARCH_LIST`` (or ``PYTORCH_ROCM_ARCH``) that would fix it.

Standard library and torch only, so it runs anywhere: ``python -m torchbake.families.gpu_probe`` against any
Python with torch (no Docker needed), and inside an image, where ``invoke verify --gpus`` runs this
file's text. It prints one JSON object after :data:`MARK`; ``--table`` prints it for people.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import asdict, dataclass

MARK = "TORCHBAKE-GPU "
NATIVE, COMPATIBLE, PTX_ONLY, NONE = "native", "compatible", "ptx-only", "none"
PASSING = (NATIVE, COMPATIBLE, PTX_ONLY)


@dataclass(frozen=True)
class Judgement:
    device: str  # "NVIDIA L4 (8.9)", "AMD Instinct MI300X (gfx942)"
    verdict: str  # NATIVE, COMPATIBLE, PTX_ONLY or NONE
    detail: str
    fix: str = ""  # for NONE: the arch list that would give this device kernels

    @property
    def passed(self) -> bool:
        return self.verdict in PASSING


def _cuda_entries(arch_list: list[str]) -> tuple[list[tuple[int, int, str]], list[tuple[int, int]]]:
    """(SASS as (major, minor, suffix), PTX as (major, minor)) of torch.cuda.get_arch_list()."""
    sass, ptx = [], []
    for entry in arch_list:
        found = re.fullmatch(r"(sm|compute)_(\d+?)(\d)([af]?)", entry.strip())
        if not found:
            continue
        major, minor, suffix = int(found[2]), int(found[3]), found[4]
        if found[1] == "sm":
            sass.append((major, minor, suffix))
        else:
            ptx.append((major, minor))
    return sass, ptx


def cuda_arch_list_text(arch_list: list[str], extra: tuple[int, int] | None = None) -> str:
    """``arch_list`` as TORCH_CUDA_ARCH_LIST spells it ("8.0;9.0+PTX"), with ``extra`` added."""
    sass, ptx = _cuda_entries(arch_list)
    wanted = sorted({(major, minor) for major, minor, _ in sass} | ({extra} if extra else set()))
    text = [f"{major}.{minor}" + ("+PTX" if (major, minor) in ptx else "") for major, minor in wanted]
    text += [f"{major}.{minor}+PTX" for major, minor in sorted(set(ptx) - set(wanted))]
    return ";".join(text)


def judge_cuda(name: str, capability: tuple[int, int], arch_list: list[str]) -> Judgement:
    """The judgement of a CUDA device of ``capability`` against torch's compiled ``arch_list``."""
    major, minor = capability
    device = f"{name} ({major}.{minor})"
    sm = f"sm_{major}{minor}"
    sass, ptx = _cuda_entries(arch_list)
    compiled = " ".join(arch_list) or "(empty)"
    if any((m, n) == (major, minor) for m, n, _ in sass):
        return Judgement(device, NATIVE, f"{sm} kernels are in torch ({compiled})")
    # plain SASS of the same major and a lower minor runs here ("a" ones only on their exact device;
    # "f" ones, a family's, on every minor at or above theirs)
    usable = sorted(((m, n) for m, n, suffix in sass if m == major and n < minor and suffix != "a"), reverse=True)
    if usable:
        runs_on = f"sm_{usable[0][0]}{usable[0][1]}"
        return Judgement(device, COMPATIBLE, f"runs {runs_on} kernels; no {sm}-specific ones (torch has {compiled});"
                                             f" for native kernels: TORCH_CUDA_ARCH_LIST="
                                             f"\"{cuda_arch_list_text(arch_list, capability)}\"")
    jit = sorted(((m, n) for m, n in ptx if (m, n) <= (major, minor)), reverse=True)
    if jit:
        return Judgement(device, PTX_ONLY, f"only PTX (compute_{jit[0][0]}{jit[0][1]}): kernels are JIT-compiled for"
                                           f" {sm} at first use (a slow first start; the driver caches them)")
    fix = cuda_arch_list_text(arch_list, capability)
    return Judgement(device, NONE, f"CUDA error: no kernel image is available for execution on the device: torch has"
                                   f" no kernels for {sm} ({compiled}) and no PTX at or below it",
                     fix=f'TORCH_CUDA_ARCH_LIST="{fix}"')


def judge_rocm(name: str, gcn_arch: str, arch_list: list[str]) -> Judgement:
    """The judgement of a ROCm device (``gcnArchName``, e.g. ``gfx90a:sramecc+:xnack-``) against
    torch's compiled ``arch_list``: AMD GPUs run only code built for their own gfx target."""
    target = gcn_arch.split(":", 1)[0]
    device = f"{name} ({target})"
    compiled = [entry.split(":", 1)[0] for entry in arch_list]
    if target in compiled:
        return Judgement(device, NATIVE, f"{target} kernels are in torch ({' '.join(arch_list)})")
    fix = ";".join(sorted({*compiled, target}))
    return Judgement(device, NONE, f"HIP error: no kernel image is available for execution on the device: torch has"
                                   f" no kernels for {target} ({' '.join(arch_list) or '(empty)'})",
                     fix=f'PYTORCH_ROCM_ARCH="{fix}"')


def _workload(torch, index: int) -> dict:
    """A matmul and a convolution on device ``index``, per dtype, checked against the CPU."""
    device = torch.device("cuda", index)
    dtypes = [torch.float32]
    if torch.cuda.is_bf16_supported():
        dtypes.append(torch.bfloat16)
    dtypes.append(torch.float16)
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=generator), torch.randn(256, 256, generator=generator)
    image, kernel = torch.randn(2, 3, 32, 32, generator=generator), torch.randn(8, 3, 3, 3, generator=generator)
    results = {}
    for dtype in dtypes:
        label = str(dtype).removeprefix("torch.")
        tolerance = 1e-3 if dtype == torch.float32 else 5e-2
        try:
            inputs = [t.to(device, dtype) for t in (a, b, image, kernel)]

            def run(x, y, picture, weights):
                return (x @ y).float().cpu(), torch.nn.functional.conv2d(picture, weights).float().cpu()

            started = time.perf_counter()
            run(*inputs)  # the first call loads the kernels (and JIT-compiles PTX): timed on its own
            torch.cuda.synchronize(device)
            first = time.perf_counter() - started
            started = time.perf_counter()
            product, convolved = run(*inputs)
            torch.cuda.synchronize(device)
            seconds = time.perf_counter() - started
            expected_product, expected_conv = (a.to(dtype).float() @ b.to(dtype).float(),
                                               torch.nn.functional.conv2d(image.to(dtype).float(), kernel.to(dtype).float()))
            errors = [float(((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item())
                      for got, want in ((product, expected_product), (convolved, expected_conv))]
            results[label] = {"ok": max(errors) <= tolerance, "relative_error": max(errors),
                              "seconds": round(seconds, 4), "first_call_seconds": round(first, 4)}
        except Exception as exc:  # noqa: BLE001 - what failed is the result
            results[label] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    return results


def probe() -> dict:
    """Every GPU torch sees, judged, with the workload's results (``error``: why none could be seen)."""
    found: dict = {"devices": []}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        found["error"] = f"torch does not import: {exc}"
        return found
    hip = getattr(torch.version, "hip", None)
    found.update(torch=torch.__version__, cuda=torch.version.cuda, hip=hip)
    if not (torch.version.cuda or hip):
        found["error"] = f"torch {torch.__version__} is built without CUDA or ROCm"
        return found
    if not torch.cuda.is_available():
        found["error"] = "torch sees no GPU (torch.cuda.is_available() is False)"
        return found
    arch_list = list(torch.cuda.get_arch_list())
    found["arch_list"] = arch_list
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        if hip:
            judged = judge_rocm(props.name, getattr(props, "gcnArchName", ""), arch_list)
        else:
            judged = judge_cuda(props.name, (props.major, props.minor), arch_list)
        entry = {"index": index, **asdict(judged), "passed": judged.passed}
        entry["workload"] = _workload(torch, index) if judged.passed else {}
        entry["passed"] = judged.passed and all(r.get("ok") for r in entry["workload"].values())
        found["devices"].append(entry)
    return found


def table(found: dict) -> str:
    """The probe's result as lines for people."""
    lines = [f"torch {found.get('torch', '?')} (CUDA {found.get('cuda')}, HIP {found.get('hip')});"
             f" arch list: {' '.join(found.get('arch_list', [])) or '(none)'}"]
    if found.get("error"):
        lines.append(f"no GPU judged: {found['error']}")
    for device in found.get("devices", []):
        lines.append(f"GPU {device['index']}: {device['device']}: {device['verdict']}"
                     f" ({'pass' if device['passed'] else 'FAIL'}) - {device['detail']}"
                     + (f"; fix: {device['fix']}" if device.get("fix") else ""))
        for dtype, result in device.get("workload", {}).items():
            lines.append(f"  {dtype}: " + (f"ok, relative error {result['relative_error']:.1e}, {result['seconds']} s"
                                           f" (first call {result['first_call_seconds']} s)"
                                           if result.get("ok") else f"FAILED {result}"))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the probe's JSON (``--table``: for people); 0 when every GPU passed, 1 when one did
    not, 2 when no GPU could be judged."""
    found = probe()
    print(table(found) if "--table" in argv else MARK + json.dumps(found))
    if found.get("error") or not found["devices"]:
        return 2
    return 0 if all(device["passed"] for device in found["devices"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
