"""Accelerators as data (torchbake.configuration.accelerators): the bundled declarations, a team's own in its
config file, every mistake in one named with the file and the key, and the device access a
declaration gives (torchbake.checks.devices)."""

from __future__ import annotations

import pytest

from torchbake.checks.devices import HostDevices, device_access
from torchbake.configuration import accelerators
from torchbake.core.errors import ConfigurationError, ContainerError
from torchbake.planning import config

OWN = """
[accelerators.xpu]
description = "an accelerator of our own"
[[accelerators.xpu.toolkits]]
key = "xpu_runtime_url"
install = "setup.sh"
required = true
runtime_paths = ["/opt/xpu"]
[accelerators.xpu.devices]
devices = ["/dev/xpu0"]
any_of = ["/dev/dri/renderD*"]
or_runtime = "xpu"
needs = "an XPU"
install = "Install the XPU driver"
groups = ["render"]
env = { XPU_VISIBLE_DEVICES = "all" }
[accelerator]
profile = "xpu"
"""


def test_the_bundled_accelerators_hold_musa_s_toolkits_and_devices():
    bundled = accelerators.bundled()
    assert list(bundled) == ["cpu", "cuda", "rocm", "musa"]
    musa = bundled["musa"]
    assert [(t.key, t.install, t.required) for t in musa.toolkits] == [
        ("musa_toolkits_url", "install.sh", True), ("mudnn_url", "install_mudnn.sh", True), ("mccl_url", "install.sh", True)]
    assert musa.toolkit("musa_toolkits_url").aliases == ("m", "musa_toolkits_url")
    assert (bundled["cuda"].devices.check, bundled["rocm"].devices.check, bundled["cpu"].devices.check) == ("nvidia", "rocm", "")


def test_a_team_s_own_accelerator_is_an_option_its_toolkit_an_option_and_its_profile_valid(tmp_path):
    own = tmp_path / "xpu.toml"
    own.write_text(OWN + '[toolkits]\nxpu_runtime_url = "https://vendor.invalid/xpu.tar.gz"\n')
    settings = config.resolve([own], {}).settings()
    assert settings.accelerator.profile == "xpu"
    assert settings.toolkits["xpu_runtime_url"] == "https://vendor.invalid/xpu.tar.gz"
    assert settings.accelerators["xpu"].toolkit("xpu_runtime_url").runtime_paths == ("/opt/xpu",)
    by_env = config.resolve([own], {"TORCHBAKE_TOOLKITS_XPU_RUNTIME_URL": "https://vendor.invalid/other.tar.gz"})
    assert by_env.settings().toolkits["xpu_runtime_url"] == "https://vendor.invalid/other.tar.gz"
    with pytest.raises(ConfigurationError) as info:  # without the file that declares it
        config.resolve([], {}, {"accelerator.profile": "xpu"})
    assert str(info.value) == ("accelerator.profile = 'xpu' (from command line) is invalid:"
                               " expected one of: cpu, cuda, rocm, musa.")


@pytest.mark.parametrize(("text", "message"), [
    ('accelerators = "x"', "h.toml: [accelerators] must be a table, not 'x'."),
    ('[accelerators.XPU]\ndescription = "x"', "h.toml: [accelerators.XPU]: an accelerator's name is lower-case letters, digits and _."),
    ('[accelerators.xpu]\ndevices = { check = "intel" }',
     "h.toml: [accelerators.xpu] devices.check = 'intel': expected one of nvidia, rocm, or no check and the devices as data."),
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
    ('[accelerators.xpu]\ncolour = "blue"', "h.toml: [accelerators.xpu]: unknown key 'colour'; expected description, toolkits, devices, flag_names."),
    ('[toolkits]\nmudn_url = "x"', "h.toml: unknown option 'toolkits.mudn_url'. Did you mean 'mudnn_url'?"),
])
def test_a_mistake_in_a_declaration_is_named_with_its_file_and_key(tmp_path, text, message):
    path = tmp_path / "h.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigurationError) as info:
        config.resolve([path], {})
    assert str(info.value).replace(str(tmp_path) + "/", "").startswith(message)


def test_declared_device_access_is_checked_on_the_host_and_given_to_the_container(tmp_path):
    own = tmp_path / "xpu.toml"
    own.write_text(OWN)
    declared = config.resolve([own], {}).settings().accelerators
    host = HostDevices(("runc",), True, {"/dev/xpu0": 0, "/dev/dri/renderD128": 109})
    assert device_access("xpu", host, declared).flags() == (
        "--device", "/dev/xpu0", "--group-add", "render", "--env", "XPU_VISIBLE_DEVICES=all")
    with pytest.raises(ContainerError, match=r"^The xpu device profile needs /dev/xpu0 on this host, which does not"
                                             r" exist\. Install the XPU driver, or pass --device-profile cpu\.$"):
        device_access("xpu", HostDevices(("runc",), True, {"/dev/dri/renderD128": 109}), declared)
    with pytest.raises(ContainerError, match=r"^The xpu device profile needs an XPU: this host has no /dev/dri/renderD\*"
                                             r" devices and the engine no xpu runtime \(runtimes: runc\)\."):
        device_access("xpu", HostDevices(("runc",), True, {"/dev/xpu0": 0}), declared)
    assert device_access("xpu", HostDevices(("runc", "xpu"), True, {"/dev/xpu0": 0}), declared).devices == ("/dev/xpu0",)
    assert device_access("xpu", HostDevices(("runc",), False, {}), declared).env == {"XPU_VISIBLE_DEVICES": "all"}
