"""Accelerators as data (torchbake.configuration.accelerators): the bundled declarations, a team's own in its
config file, every mistake in one named with the file and the key, and the device access a
declaration gives (torchbake.checks.devices)."""

from __future__ import annotations

import pytest

from torchbake.checks.devices import HostDevices, device_access, host_devices
from torchbake.configuration import accelerators
from torchbake.core.errors import ConfigurationError, ContainerError
from torchbake.planning import config

OWN = """
[accelerators.demo]
description = "an accelerator of our own"
[[accelerators.demo.toolkits]]
key = "xpu_runtime_url"
install = "setup.sh"
required = true
runtime_paths = ["/opt/xpu"]
[accelerators.demo.devices]
devices = ["/dev/xpu0"]
any_of = ["/dev/dri/renderD*"]
or_runtime = "xpu"
needs = "an XPU"
install = "Install the XPU driver"
groups = ["render"]
env = { XPU_VISIBLE_DEVICES = "all" }
[accelerator]
profile = "demo"
"""


def test_the_bundled_accelerators_hold_musa_s_toolkits_and_devices():
    bundled = accelerators.bundled()
    assert list(bundled) == ["cpu", "cuda", "rocm", "musa", "ascend", "tpu", "xpu"]
    musa = bundled["musa"]
    assert [(t.key, t.install, t.required) for t in musa.toolkits] == [
        ("musa_toolkits_url", "install.sh", True), ("mudnn_url", "install_mudnn.sh", True), ("mccl_url", "install.sh", True)]
    assert musa.toolkit("musa_toolkits_url").aliases == ("m", "musa_toolkits_url")
    assert (bundled["cuda"].devices.check, bundled["rocm"].devices.check, bundled["cpu"].devices.check) == ("nvidia", "rocm", "")


def test_a_team_s_own_accelerator_is_an_option_its_toolkit_an_option_and_its_profile_valid(tmp_path):
    own = tmp_path / "xpu.toml"
    own.write_text(OWN + '[toolkits]\nxpu_runtime_url = "https://vendor.invalid/xpu.tar.gz"\n')
    settings = config.resolve([own], {}).settings()
    assert settings.accelerator.profile == "demo"
    assert settings.toolkits["xpu_runtime_url"] == "https://vendor.invalid/xpu.tar.gz"
    assert settings.accelerators["demo"].toolkit("xpu_runtime_url").runtime_paths == ("/opt/xpu",)
    by_env = config.resolve([own], {"TORCHBAKE_TOOLKITS_XPU_RUNTIME_URL": "https://vendor.invalid/other.tar.gz"})
    assert by_env.settings().toolkits["xpu_runtime_url"] == "https://vendor.invalid/other.tar.gz"
    with pytest.raises(ConfigurationError) as info:  # without the file that declares it
        config.resolve([], {}, {"accelerator.profile": "demo"})
    assert str(info.value) == ("accelerator.profile = 'demo' (from command line) is invalid:"
                               " expected one of: cpu, cuda, rocm, musa, ascend, tpu, xpu.")


@pytest.mark.parametrize(("text", "message"), [
    ('accelerators = "x"', "h.toml: [accelerators] must be a table, not 'x'."),
    ('[accelerators.XPU]\ndescription = "x"', "h.toml: [accelerators.XPU]: an accelerator's name is lower-case letters, digits and _."),
    ('[accelerators.xpu]\ndevices = { check = "In tel" }',
     "h.toml: [accelerators.xpu] devices.check = 'In tel': expected one of nvidia, rocm (torchbake.families)"),
    ('[[accelerators.xpu.toolkits]]\nkey = "mudnn_url"',
     "h.toml: accelerator 'xpu' declares the toolkit 'mudnn_url', which 'musa' declares too; give it another key."),
    ('[[accelerators.xpu.toolkits]]\nkey = "xpu_url"\nrequired = "yes"',
     "h.toml: [accelerators.xpu] toolkits[0].required must be true or false, not 'yes'."),
    ('[accelerators.xpu]\ndevices = { any_of = ["/**"] }',
     "h.toml: [accelerators.xpu] devices: '/**' is not a device node: expected a path under /dev/"),
    ('[accelerators.xpu]\ndevices = { devices = ["/dev/../etc/passwd"] }',
     "h.toml: [accelerators.xpu] devices: '/dev/../etc/passwd' is not a device node"),
    ('[accelerators.xpu.toolkits]\nkey = "xpu_url"',
     "h.toml: [accelerators.xpu] toolkits must be a list of tables, one [[accelerators.xpu.toolkits]] per toolkit."),
    ('[accelerators.xpu]\ncolour = "blue"', "h.toml: [accelerators.xpu]: unknown key 'colour'; expected description, on_device, toolkits, devices, flag_names."),
    ('[accelerators.xpu]\ndevices = { mounts = ["/usr/../etc"] }',
     "h.toml: [accelerators.xpu] devices: mounts '/usr/../etc' is not a host path to mount"),
    ('[accelerators.xpu]\ndevices = { mounts = ["/tmp\\n"] }',
     "h.toml: [accelerators.xpu] devices: mounts '/tmp\\n' is not a host path to mount"),
    ('[accelerators.xpu]\ndevices = { devices = ["/dev/null\\n"] }',
     "h.toml: [accelerators.xpu] devices: '/dev/null\\n' is not a device node"),
    ('[accelerators.xpu]\ndevices = { mounts = ["/opt/d,readonly=false"] }',
     "h.toml: [accelerators.xpu] devices: mounts '/opt/d,readonly=false' is not a host path to mount"),
    ('[accelerators.xpu]\ndevices = { groups = ["a b"] }',
     "h.toml: [accelerators.xpu] devices: groups 'a b' is not a group: expected a group's name"),
    ('[[accelerators.xpu.toolkits]]\nkey = "xpu_url"\ninstall = "--install *"',
     "h.toml: [accelerators.xpu] toolkits[0]: install = '--install *': expected the install script's name, or a .run"),
    ('[[accelerators.xpu.toolkits]]\nkey = "xpu_url"\ninstall = "--install\\nsneaky\\t../evil.run"',
     "h.toml: [accelerators.xpu] toolkits[0]: install = '--install\\nsneaky\\t../evil.run': expected"),
    ('[toolkits]\nmudn_url = "x"', "h.toml: unknown option 'toolkits.mudn_url'. Did you mean 'mudnn_url'?"),
    ('[[accelerators.npu.toolkits]]\nkey = "npu_url"\naliases = ["n"]',
     "h.toml: [accelerators.npu] toolkits[0].aliases 'n': only the toolkits torchbake ships have flags, with the"
     " spellings it gives them (the tasks' flags are made before any --config is read). Set npu_url with [toolkits]"
     ' npu_url = "URL or path" in a --config file, or TORCHBAKE_TOOLKITS_NPU_URL; leave it out.'),
    ('[[accelerators.musa.toolkits]]\nkey = "mudnn_url"\naliases = ["mudnn_url", "m"]',
     "h.toml: [accelerators.musa] toolkits[0].aliases 'm': only the toolkits torchbake ships have flags, with the"
     " spellings it gives them (the tasks' flags are made before any --config is read); the shipped mudnn_url's are"
     " 'mudnn_url'; leave it out."),
    ('[accelerators.xpu]\nflag_names = { extension_whl_url = "xpu_whl_url" }',
     "h.toml: [accelerators.xpu] flag_names extension_whl_url = 'xpu_whl_url': only the accelerators torchbake ships"
     " give flags other names; the tasks' flags"),
    ('[accelerators.musa]\nflag_names = { extension_whl_url = "torch_musa_whl_url", python = "py" }',
     "h.toml: [accelerators.musa] flag_names python = 'py': only the accelerators torchbake ships give flags other"
     " names (the shipped musa's are extension_whl_url = 'torch_musa_whl_url', extension_tag = 'torch_musa_tag');"),
    ('[accelerator]\nplatform_arch_lists = { "linux/arm64" = 9 }',
     "accelerator.platform_arch_lists = {'linux/arm64': 9} (from h.toml) is invalid: 'linux/arm64' = 9: expected a"
     ' string for each platform, e.g. { "linux/arm64" = "8.0;9.0" }.'),
])
def test_a_mistake_in_a_declaration_is_named_with_its_file_and_key(tmp_path, text, message):
    path = tmp_path / "h.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigurationError) as info:
        config.resolve([path], {})
    assert str(info.value).replace(str(tmp_path) + "/", "").startswith(message)


def test_a_teams_toolkit_is_shown_with_its_help_in_the_documented_configuration(tmp_path):
    from tests.conftest import run_invoke

    path = tmp_path / "h.toml"
    path.write_text('[[accelerators.npu.toolkits]]\nkey = "npu_url"\nhelp = "The NPU runtime tarball"\n')
    shown = run_invoke("show-config", "--config", str(path), "--format", "toml", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert '# The NPU runtime tarball\nnpu_url = ""\n' in shown.stdout


def test_declared_device_access_is_checked_on_the_host_and_given_to_the_container(tmp_path):
    own = tmp_path / "xpu.toml"
    own.write_text(OWN)
    declared = config.resolve([own], {}).settings().accelerators
    host = HostDevices(("runc",), True, {"/dev/xpu0": 0, "/dev/dri/renderD128": 109})
    assert device_access("demo", host, declared).flags() == (
        "--device", "/dev/xpu0", "--group-add", "render", "--env", "XPU_VISIBLE_DEVICES=all")
    with pytest.raises(ContainerError, match=r"^The demo device profile needs /dev/xpu0 on this host, which does not"
                                             r" exist\. Install the XPU driver, or pass --device-profile cpu\.$"):
        device_access("demo", HostDevices(("runc",), True, {"/dev/dri/renderD128": 109}), declared)
    with pytest.raises(ContainerError, match=r"^The demo device profile needs an XPU: this host has no /dev/dri/renderD\*"
                                             r" devices and the engine no xpu runtime \(runtimes: runc\)\."):
        device_access("demo", HostDevices(("runc",), True, {"/dev/xpu0": 0}), declared)
    assert device_access("demo", HostDevices(("runc", "xpu"), True, {"/dev/xpu0": 0}), declared).devices == ("/dev/xpu0",)
    assert device_access("demo", HostDevices(("runc",), False, {}), declared).env == {"XPU_VISIBLE_DEVICES": "all"}


ASCEND_NODES = {"/dev/davinci0": 0, "/dev/davinci1": 0, "/dev/davinci_manager": 0, "/dev/devmm_svm": 0, "/dev/hisi_hdc": 0}


def test_ascend_gets_every_npu_its_managers_and_the_driver_folder_read_only():
    """Huawei's documented run: each /dev/davinciN, davinci_manager, devmm_svm, hisi_hdc and the
    host's driver folder, read-only at the same path (in flags and in the Engine API's mounts)."""
    host = HostDevices(("runc",), True, ASCEND_NODES, frozenset({"/usr/local/Ascend/driver"}))
    access = device_access("ascend", host)
    assert access.flags() == (
        "--device", "/dev/davinci0", "--device", "/dev/davinci1", "--device", "/dev/davinci_manager",
        "--device", "/dev/devmm_svm", "--device", "/dev/hisi_hdc",
        "--mount", "type=bind,source=/usr/local/Ascend/driver,target=/usr/local/Ascend/driver,readonly")
    assert access.mount_entries() == [{"Type": "bind", "Source": "/usr/local/Ascend/driver",
                                       "Target": "/usr/local/Ascend/driver", "ReadOnly": True}]
    without_npus = HostDevices(("runc",), True, {k: v for k, v in ASCEND_NODES.items() if "davinci_" in k or "davinci" not in k},
                               frozenset({"/usr/local/Ascend/driver"}))
    with pytest.raises(ContainerError, match=r"^The ascend device profile needs /dev/davinci\[0-9\]\* on this host"):
        device_access("ascend", without_npus)
    with pytest.raises(ContainerError, match=r"needs /usr/local/Ascend/driver on this host, which does not exist\."
                                             r" Install the Ascend NPU driver"):
        device_access("ascend", HostDevices(("runc",), True, ASCEND_NODES))
    with pytest.raises(ContainerError, match=r"passes every /dev/davinci\[0-9\]\* node of the engine's host"):
        device_access("ascend", HostDevices(("runc",), False, {}))


def test_tpu_runs_privileged_with_pjrt_on_a_tpu_vm_and_xpu_joins_the_groups_of_dev_dri():
    tpu = device_access("tpu", HostDevices(("runc",), True, {"/dev/vfio": 0}))
    assert tpu.flags() == ("--privileged", "--env", "PJRT_DEVICE=TPU")
    with pytest.raises(ContainerError, match=r"^The tpu device profile needs a Google TPU \(a Cloud TPU VM\): this"
                                             r" host has no /dev/accel\* or /dev/vfio devices\."):
        device_access("tpu", HostDevices(("runc",), True, {}))
    nodes = {"/dev/dri": 0, "/dev/dri/card0": 44, "/dev/dri/renderD128": 993}
    assert device_access("xpu", HostDevices(("runc",), True, nodes)).flags() == (
        "--device", "/dev/dri", "--group-add", "44", "--group-add", "993")
    with pytest.raises(ContainerError, match=r"^The xpu device profile needs /dev/dri on this host"):
        device_access("xpu", HostDevices(("runc",), True, {}))


def test_the_host_is_probed_for_the_nodes_inside_a_declared_folder_and_the_mounts(tmp_path, monkeypatch):
    from torchbake.checks import devices

    monkeypatch.setattr(devices, "engine_is_local", lambda: True)
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    (tmp_path / "dev" / "dri" / "renderD128").write_text("")
    (tmp_path / "usr/local/Ascend/driver").mkdir(parents=True)
    bundled = accelerators.bundled()
    host = host_devices({"Runtimes": {"runc": {}}}, [bundled["xpu"], bundled["ascend"]], root=tmp_path)
    assert {"/dev/dri", "/dev/dri/renderD128"} <= set(host.nodes)
    assert host.paths == frozenset({"/usr/local/Ascend/driver"})


def test_a_check_no_family_has_is_named_with_its_file_when_the_file_is_read(tmp_path):
    own = tmp_path / "h.toml"
    own.write_text('[accelerators.npu]\ndevices = { check = "intel" }\n')
    with pytest.raises(ConfigurationError) as info:
        config.resolve([own], {}).settings()
    assert str(info.value) == (f"{own}: [accelerators.npu] devices.check = 'intel': expected one of nvidia, rocm"
                               " (torchbake.families), or no check and the devices as data.")


DEMO_FAMILY = '''"""A made-up GPU family in one module: its arch list (an option, ENV and label), its device
access, its host's GPUs and their judgement."""

import re

from torchbake.families import gpu_probe
from torchbake.families.family import ArchList, DeviceAccess, Family, HostGpu


def check(value):
    if not all(re.fullmatch(r"d[0-9]+", a) for a in value.split(";") if a):
        raise ValueError("expected demo targets separated by ';', e.g. 'd1;d2'")


def access(profile, host):
    return DeviceAccess(devices=tuple(n for n in host.nodes if n.startswith("/dev/demogpu")), group_add=("video",))


def parse_gpus(output):
    return [HostGpu(*line.split(",")) for line in output.splitlines()]


def judge(gpu, label):
    ok = gpu.arch in label.split(";")
    return gpu_probe.Judgement(f"{gpu.name} ({gpu.arch})", gpu_probe.NATIVE if ok else gpu_probe.NONE, "demo", label + ";" + gpu.arch)


ARCH = ArchList(setting="demo_arch", env="DEMO_ARCH", label="torchbake.demo-arch", check=check, help="DEMO_ARCH")
FAMILY = Family(check="demogpu", arch=ARCH, nodes=("/dev/demogpu[0-9]*",), access=access, lister=("demo-smi", "-l"),
                parse_gpus=parse_gpus, judge=judge)
'''

USE_IT = '''
import sys
from torchbake.checks import gpu_check
from torchbake.checks.devices import HostDevices, device_access
from torchbake.planning import config

declared = config.resolve([sys.argv[1]], {}).settings().accelerators
print(device_access("demo", HostDevices(("runc",), True, {"/dev/demogpu0": 44}), declared).flags())
try:
    gpu_check.before_run("demogpu", "x/demo:1", {"torchbake.demo-arch": "d1"}, gpu_check.host_gpus("demogpu"))
except Exception as exc:
    print(type(exc).__name__, exc)
from torchbake.checks import verify
print(verify.gpu_checks(None, "x/demo:1", "demo", declared["demo"]))
import os, subprocess
class Local:  # the image: this Python, its ENV DEMO_ARCH as a dev build keeps it
    def run_capture(self, image, argv, entrypoint):
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env={**os.environ, "DEMO_ARCH": "d1"})
        return type("Result", (), {"output": done.stdout + done.stderr, "returncode": done.returncode})()
facts = verify.probe(Local(), "x/demo:1", "")
labels = {"torchbake.python": "3.11", "torchbake.variant": "dev", "torchbake.demo-arch": "d1"}
print([(c.name, c.status) for c in verify.evaluate(facts, verify.Expectations.from_labels(labels)) if "ARCH" in c.name])
'''


def test_a_gpu_like_family_is_one_new_module(tmp_path):
    """A made-up GPU family added as one module in a copy of the project (and its accelerator as a
    table naming it): its arch option (checked, kept as ENV and label), run-container's device
    access and the GPU check before a run (its lister's output parsed) are the module's. No other
    file changes."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import ROOT, run_invoke

    tracked = subprocess.run(["git", "ls-files", "torchbake", "configs", "docker", "tasks.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "torchbake/families/demo.py").write_text(DEMO_FAMILY)
    (tmp_path / "demo.toml").write_text('[accelerators.demo]\ndescription = "demo GPUs"\ndevices = { check = "demogpu" }\n')
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/demo-smi").write_text("#!/bin/sh\n[ \"$1\" = -l ] && echo 'Demo GPU,d2'\n")
    (tmp_path / "bin/demo-smi").chmod(0o755)
    result = subprocess.run([sys.executable, "-c", USE_IT, str(tmp_path / "demo.toml")], cwd=tmp_path,
                            capture_output=True, text=True,
                            env={"PYTHONPATH": str(tmp_path), "PATH": f"{tmp_path}/bin:/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "('--device', '/dev/demogpu0', '--group-add', 'video')"
    assert lines[1:3] == ["ContainerError x/demo:1 has no kernels for 1 GPU(s) of this host (the image's arch list: d1):",
                          "  Demo GPU (d2): demo. Rebuild with d1;d2."], lines
    assert lines[5] == "[('DEMO_ARCH recorded', 'pass')]"  # verify reads the family's ENV in the image
    assert lines[4] == ("[CheckResult(name='GPU checks', status='skip', detail=\"not run: torchbake's probe judges the GPUs"
                        " of CUDA and ROCm builds of torch; the demogpu family's are not probed in the image\")]")

    def plan(arch: str) -> subprocess.CompletedProcess[str]:
        return run_invoke("build", "--release", "--dry-run", "--docker", "/usr/bin/docker", cwd=tmp_path, root=tmp_path,
                          env={"PYTHONPATH": str(tmp_path), "TORCHBAKE_ACCELERATOR_DEMO_ARCH": arch})

    planned = plan("d1;d2")
    assert planned.returncode == 0, planned.stderr
    assert "ENV             DEMO_ARCH=d1;d2" in planned.stdout
    assert "--label 'torchbake.demo-arch=d1;d2'" in planned.stdout
    refused = plan("sm_90")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ("accelerator.demo_arch = 'sm_90' (from environment TORCHBAKE_ACCELERATOR_DEMO_ARCH) is invalid: expected"
            " demo targets separated by ';', e.g. 'd1;d2'") in " ".join(refused.stderr.split())


def test_a_check_no_family_has_is_refused_before_any_work(tmp_path, monkeypatch):
    """`invoke build --dry-run` of a config whose accelerator names a family torchbake lacks: exit 2,
    naming the file, the key and the families there are, before the plan."""
    from tests.conftest import run_invoke

    own = tmp_path / "h.toml"
    own.write_text('[accelerators.npu]\ndevices = { check = "intel" }\n[accelerator]\nprofile = "npu"\n')
    result = run_invoke("build", "--release", "--config", str(own), "--dry-run", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (f"{own}: [accelerators.npu] devices.check = 'intel': expected one of nvidia, rocm"
            " (torchbake.families), or no check and the devices as data.") in " ".join(result.stderr.split())
    assert "Plan for" not in result.stdout


def test_a_device_pattern_matches_within_one_path_component_as_the_host_is_searched(tmp_path):
    """`/dev/npu*` passes /dev/npu0 and the /dev/npu folder (its nodes with it), never a node inside
    that folder on its own: `*` does not cross `/`, as the glob that searched the host did not."""
    own = tmp_path / "h.toml"
    own.write_text('[accelerators.npu]\ndevices = { devices = ["/dev/npu*"] }\n')
    declared = config.resolve([own], {}).settings().accelerators
    host = HostDevices(("runc",), True, {"/dev/npu": 0, "/dev/npu/queue0": 0, "/dev/npu0": 0})
    assert device_access("npu", host, declared).devices == ("/dev/npu", "/dev/npu0")
