"""Proving a built image works: checks run in one throwaway container, judged on the host.

Expectations come from the image's ``torchbake.*`` labels (so ``invoke verify IMAGE`` works on
any torchbake image) and may be overridden. The container runs with ``--network none``: every
check is offline, including the constraint check, which offers pip a fake ``torch 0.0.1`` wheel
and expects pip to refuse it because of the image's constraints file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchbake.adapters.engine import DockerClient, marked_json
from torchbake.configuration.accelerators import Accelerator
from torchbake.core import output
from torchbake.core.errors import ImageNotFoundError, VerificationError
from torchbake.core.lazy import LazyModule
from torchbake.core.output import styled
from torchbake.families import FAMILIES
from torchbake.families.family import FAIL, PASS, SKIP
from torchbake.supply_chain import inventory

if TYPE_CHECKING:
    from torchbake import variants
else:
    variants = LazyModule("torchbake.variants")  # an image's variant names its checks; read when one is verified

MARK = "TORCHBAKE-VERIFY "

PROBE_SCRIPT = r'''
import contextlib, io, json, os, platform, runpy, shutil, subprocess, sys, tempfile, zipfile
import glob


def pip(*args):
    """`python -m pip ARGS` in this process: exit status and output. Both pip commands share one
    interpreter and one import of pip (0.4 s of CPU for the two instead of 1.1 s as subprocesses)."""
    captured, argv, code = io.StringIO(), sys.argv[:], 0
    sys.argv = ["pip", *args]
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            runpy.run_module("pip", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # pip itself broke: a failed check, not a failed probe
        code = 1
        captured.write(repr(exc))
    finally:
        sys.argv = argv
    return code, captured.getvalue()


out = {"python": "%d.%d" % sys.version_info[:2], "python_full": sys.version.split()[0], "machine": platform.machine()}
out["env"] = {k: os.environ.get(k, "") for k in ARCH_ENV}  # each family's (torchbake.families)
out["built"] = {}
for path in sorted(glob.glob("/etc/torchbake/built/*.json")):
    with open(path) as fh:
        record = json.load(fh)
    out["built"][record["role"]] = record
out["sources"] = {}
for name in ("pytorch", "vision", "audio"):
    try:
        with open("/home/%s/.torchbake-source" % name) as fh:
            out["sources"][name] = fh.read().split()
    except OSError:
        pass
try:
    import torch
    out["git_version"] = getattr(torch.version, "git_version", "")
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    try:
        out["arch_flags"] = torch._C._cuda_getArchFlags()
    except Exception:
        out["arch_flags"] = None
    out["gpu"] = bool(torch.version.cuda) and torch.cuda.is_available()
    if out["gpu"]:
        out["arch_list"] = torch.cuda.get_arch_list()
except Exception as exc:
    out["torch_error"] = repr(exc)
module = sys.argv[1] if len(sys.argv) > 1 else ""
if module:
    try:
        __import__(module)
        out["extension"] = "ok"
    except Exception as exc:
        out["extension_error"] = repr(exc)
code, text = pip("check")
out["pip_check"] = [code, text[-2000:]]
with tempfile.TemporaryDirectory() as folder:  # (the probe runs on the host too: nothing left behind)
    wheel = os.path.join(folder, "torch-0.0.1-py3-none-any.whl")
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torchbake_fake_torch.py", "")
        zf.writestr("torch-0.0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n")
        zf.writestr("torch-0.0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: torchbake\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("torch-0.0.1.dist-info/RECORD", "")
    code, text = pip("install", "--dry-run", "--no-index", "--find-links", folder, "torch==0.0.1")
    out["constraint"] = [code, text[-2000:], os.environ.get("PIP_CONSTRAINT", "")]
    uv = shutil.which("uv")
    if uv:
        attempt = subprocess.run([uv, "pip", "install", "--dry-run", "--offline", "--no-index", "--python", sys.executable,
                                  "--find-links", folder, "torch==0.0.1"], capture_output=True, text=True)
        out["uv_constraint"] = [attempt.returncode, (attempt.stdout + attempt.stderr)[-2000:], os.environ.get("UV_CONSTRAINT", "")]
out["inventory"] = torchbake_inventory()
print("TORCHBAKE-VERIFY " + json.dumps(out))
'''


# The groups of checks a variant's images get (its Variant's verifies); python version and pip
# check are every image's.
SOURCES = "sources"  # each source tree at the commit its label records
TORCH = "torch"  # torch (and the extension) import at the recorded versions, and pip cannot replace torch
FROM_SOURCE = "from source"  # torch was built from the recorded commit, the arch variables kept as ENV
CHECKS = (SOURCES, TORCH, FROM_SOURCE)


@dataclass(frozen=True)
class Expectations:
    python: str
    torch: str
    extension_module: str = ""
    arch_lists: tuple[tuple[str, str], ...] = ()  # (a family's arch label, the list) of each family (torchbake.families)
    profile: str = "cpu"
    variant: str = "release"
    source_commits: tuple[tuple[str, str], ...] = ()  # (name, commit) from torchbake.source.* labels

    @property
    def checks(self) -> frozenset[str]:
        """The groups of :data:`CHECKS` the image's variant declares (its ``verifies``); an image of
        a variant this torchbake does not know gets a release image's."""
        kind = variants.VARIANTS.get(self.variant) or variants.VARIANTS["release"]
        return kind.verifies

    @classmethod
    def of_image(cls, client: DockerClient, image: str, arch_lists: Mapping[str, str] | None = None,
                 **overrides: str | None) -> Expectations:
        """What the image's torchbake labels promise; an image the engine lacks is an error."""
        info = client.inspect_image(image)
        if info is None:
            raise ImageNotFoundError(image)
        return cls.from_labels((info.get("Config") or {}).get("Labels") or {}, arch_lists, **overrides)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str], arch_lists: Mapping[str, str] | None = None,
                    **overrides: str | None) -> Expectations:
        """What ``labels`` promise; ``arch_lists`` (arch label → list) and ``overrides`` (a field →
        value) expect other values where given."""
        values = {
            "python": labels.get("torchbake.python", ""),
            "torch": labels.get("torchbake.torch-version", ""),
            "extension_module": labels.get("torchbake.extension-module", ""),
            "profile": labels.get("torchbake.profile", "cpu"),
            "variant": labels.get("torchbake.variant", "release"),
        }
        values.update({k: v for k, v in overrides.items() if v})
        given = arch_lists or {}
        wanted = ((f.arch.label, given.get(f.arch.label) or labels.get(f.arch.label, "")) for f in FAMILIES.values())
        commits = sorted((key.split(".")[2], value) for key, value in labels.items()
                         if key.startswith("torchbake.source.") and key.endswith(".commit"))
        return cls(**values, arch_lists=tuple((label, text) for label, text in wanted if text),
                   source_commits=tuple(commits))


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    detail: str


def probe(client: DockerClient, image: str, extension_module: str) -> dict:
    # what the image holds (its SBOM's packages) is read in the same container
    arch_env = f"ARCH_ENV = {tuple(family.arch.env for family in FAMILIES.values())!r}\n"
    argv = ["-c", inventory.script() + arch_env + PROBE_SCRIPT] + ([extension_module] if extension_module else [])
    result = client.run_capture(image, argv, entrypoint="python")
    facts = marked_json(result.output, MARK)
    if facts is not None:
        return facts
    if "executable file not found" in result.output:
        raise VerificationError(
            f"{image} has no `python` on its PATH, so there is nothing to verify: it is not an image with a Python"
            " environment (torchbake's images have /opt/venv/bin/python). Verify an image `invoke build` made."
        )
    raise VerificationError(
        f"Could not run the checks in {image}: `python` in the image did not answer"
        f" (exit {result.returncode}). Its last output:\n{result.output.strip()[-1500:]}"
    )


def version_matches(found: str, expected: str) -> bool:
    """``torch.__version__`` against the version the image records: equal, or, where the record
    names none, the same release with the build the wheel appends at import (PyPI's torch wheels
    are version 2.13.0 and say 2.13.0+cu130). A recorded local version (2.13.0+cpu) must be exact."""
    from packaging.version import InvalidVersion, Version

    if found == expected:
        return True
    try:
        return "+" not in expected and Version(found).public == Version(expected).public
    except InvalidVersion:
        return False


def evaluate(facts: dict, expected: Expectations) -> list[CheckResult]:
    checks = []

    def add(name: str, ok: bool | None, detail: str) -> None:
        checks.append(CheckResult(name, SKIP if ok is None else PASS if ok else FAIL, detail))

    def pip_check() -> None:
        code, text = facts["pip_check"]
        add("pip check", code == 0, text.strip().splitlines()[-1] if text.strip() else "clean")

    add("python version", facts["python"] == expected.python if expected.python else None,
        f"{facts['python_full']} (expected {expected.python or 'not recorded'})")
    if SOURCES in expected.checks:
        for name, commit in expected.source_commits:
            found = facts.get("sources", {}).get(name)
            add(f"{name} source", bool(found) and found[2] == commit,
                f"/home/{name} at {found[1]} {found[2][:12]}" if found else f"/home/{name} has no .torchbake-source")
    if TORCH not in expected.checks:
        pip_check()
        return checks
    torch_error = facts.get("torch_error")
    add("torch imports", torch_error is None, torch_error or f"torch {facts.get('torch')}")
    if torch_error is None:
        add("torch version", version_matches(facts["torch"], expected.torch) if expected.torch else None,
            f"{facts['torch']} (expected {expected.torch or 'not recorded'})")
    if expected.extension_module:
        error = facts.get("extension_error")
        add(f"{expected.extension_module} imports", error is None, error or "imported")
    pip_check()
    code, text, constraint = facts["constraint"]
    refused = code != 0 and "constraint" in text
    detail = (f"pip refused torch==0.0.1 ({constraint})" if refused
              else f"pip would replace torch: {text.strip().splitlines()[-1] if text.strip() else code}")
    if "uv_constraint" in facts:  # uv is in the image too: it must refuse as well
        code, text, constraint = facts["uv_constraint"]
        refused_by_uv = code != 0 and "torch" in text
        refused = refused and refused_by_uv
        detail += ("; uv refused it too" + (f" ({constraint})" if constraint else "") if refused_by_uv
                   else f"; uv would replace torch: {text.strip().splitlines()[-1] if text.strip() else code}")
    add("torch pinned", refused, detail)
    if FROM_SOURCE in expected.checks:
        commits = dict(expected.source_commits)
        built = facts.get("built", {}).get("pytorch")
        if built is None:
            add("torch from source", False, "no record of a PyTorch source build (/etc/torchbake/built/pytorch.json)")
        else:
            wanted = commits.get("pytorch", "")
            ok = built["commit"] == wanted
            if ok and built["name"].lower() == "torch":
                ok = facts.get("git_version") == wanted
            add("torch from source", ok, f"{built['name']} {built['version']} built at {built['commit'][:12]}"
                f" (expected {wanted[:12] or 'not recorded'})")
    return checks + _arch_rows(facts, expected)


def _arch_rows(facts: dict, expected: Expectations) -> list[CheckResult]:
    """Each family's arch list the image is for (torchbake.families): where torch was built in it,
    the ENV PyTorch's build read; then the family's own row of what torch has."""
    recorded = dict(expected.arch_lists)
    wanted = {family: recorded.get(family.arch.label, "") for family in FAMILIES.values()}
    rows = []
    if FROM_SOURCE in expected.checks:
        for family, arch_list in wanted.items():
            key = family.arch.env
            if arch_list:
                found = facts.get("env", {}).get(key, "")
                rows.append(CheckResult(f"{key} recorded", PASS if found == arch_list else FAIL,
                                        f"ENV {key}={found!r} (expected {arch_list!r})"))
    rows += [CheckResult(*family.verify_row(facts, arch_list)) for family, arch_list in wanted.items()
             if arch_list and family.verify_row is not None]
    return rows


def render_table(image: str, checks: list[CheckResult]) -> None:
    table = output.table(title=f"verify {image}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    style = {PASS: "green", FAIL: "bold red", SKIP: "yellow"}
    for check in checks:
        table.add_row(check.name, styled((check.status, style[check.status])), check.detail)
    output.channel().show(table)


def gpu_checks(client: DockerClient, image: str, profile: str, accelerator: Accelerator | None) -> list[CheckResult]:
    """The GPU probe (:mod:`torchbake.families.gpu_probe`) in ``image`` with the profile's device access:
    one row per GPU (pass: native, compatible or PTX only, and the workload right; fail: no
    kernels, or a wrong result); one skip row saying why when they could not run."""
    from torchbake.checks import gpu_check
    from torchbake.checks.devices import device_access, host_devices
    from torchbake.core.errors import ContainerError

    def not_run(why: str) -> list[CheckResult]:
        return [CheckResult("GPU checks", SKIP, f"not run: {why}")]

    if accelerator is not None and accelerator.on_device and not accelerator.devices.check:
        return not_run(f"torchbake's probe judges NVIDIA and AMD GPUs; {accelerator.on_device} is proven only"
                       f" on {accelerator.devices.needs or 'the device'}")
    if accelerator is None or not accelerator.devices.check:
        return not_run(f"the image's {profile} profile has no GPUs (the cuda and rocm profiles have)")
    if not FAMILIES[accelerator.devices.check].probed:
        return not_run(f"torchbake's probe judges the GPUs of CUDA and ROCm builds of torch; the"
                       f" {accelerator.devices.check} family's are not probed in the image")
    try:
        access = device_access(profile, host_devices(client.engine_info(), [accelerator]), {profile: accelerator})
    except ContainerError as exc:
        return not_run(f"this host cannot give a {profile} container its GPUs: {exc}")
    result = client.run_capture(image, ["-c", gpu_check.probe_source()], entrypoint="python",
                                device_options=access.host_config())
    found = marked_json(result.output, gpu_check.gpu_probe.MARK)
    if found is None:
        return [CheckResult("GPU checks", FAIL, f"the GPU probe did not answer (exit {result.returncode}):"
                                                f" {result.output.strip()[-300:]}")]
    if found.get("error") or not found.get("devices"):
        return [CheckResult("GPU checks", FAIL, f"the container got the GPUs, and torch judged none: "
                                                f"{found.get('error') or 'no device'}")]
    rows = []
    for device in found["devices"]:
        work = ", ".join(f"{dtype} {'ok' if r.get('ok') else 'WRONG'}" + (f" {r['seconds']} s" if 'seconds' in r else "")
                         for dtype, r in device.get("workload", {}).items())
        detail = f"{device['verdict']}: {device['detail']}" + (f"; fix: {device['fix']}" if device.get("fix") else "")
        rows.append(CheckResult(f"GPU {device['index']} {device['device']}", PASS if device["passed"] else FAIL,
                                detail + (f"; matmul+conv: {work}" if work else "")))
    return rows


def verify_image(client: DockerClient, image: str, expected: Expectations, *, gpus: bool = False,
                 accelerator: Accelerator | None = None) -> list[CheckResult]:
    """Run every check; print the table; raise ``VerificationError`` if any failed."""
    return verify_facts(client, image, expected, gpus=gpus, accelerator=accelerator)[0]


def verify_facts(client: DockerClient, image: str, expected: Expectations, *, gpus: bool = False,
                 accelerator: Accelerator | None = None) -> tuple[list[CheckResult], dict]:
    """:func:`verify_image`, and the facts the probe found (``inventory``: the image's packages;
    ``gpu_checks``: the GPU rows, when asked)."""
    facts = probe(client, image, expected.extension_module)
    checks = evaluate(facts, expected)
    engine = str(client.engine_info().get("Architecture") or "")  # the machine the checks ran on
    if facts.get("machine") and engine:
        how = "natively" if facts["machine"] == engine else f"emulated (QEMU) on this {engine} engine"
        checks.insert(1, CheckResult("machine", PASS, f"{facts['machine']}, checked {how}"))
    if accelerator is not None and accelerator.on_device:  # said, never passed in silence
        checks.append(CheckResult("on the device", SKIP, f"not proven here: {accelerator.on_device}"
                                                         f" (needs {accelerator.devices.needs or 'the device'})"))
    if gpus:
        rows = gpu_checks(client, image, expected.profile, accelerator)
        checks += rows
        facts["gpu_checks"] = [{"name": r.name, "status": r.status, "detail": r.detail} for r in rows]
    render_table(image, checks)
    for check in checks:
        if check.name == "GPU checks" and check.status == SKIP:
            output.channel().say((f"The GPU checks were NOT run: {check.detail.removeprefix('not run: ')}", "yellow"))
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        raise VerificationError(f"{image} failed verification: {', '.join(failed)}.")
    return checks, facts
