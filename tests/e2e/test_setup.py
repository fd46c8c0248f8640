"""The set-up on a bare machine, on the real kernel: QEMU's handler registered where nothing
registered it (no systemd reads /usr/lib/binfmt.d, no update-binfmts).

Each test runs scripts/ensure-emulation.sh in a user and mount namespace of its own with a
binfmt_misc instance of that namespace (Linux 6.7 and later): it starts empty, as on a machine
that just booted, and the host's handlers, which other tests' emulated builds use meanwhile, are
never touched. Whatever happens, the namespace goes with the process: nothing to restore."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MACHINE = {"x86_64": "aarch64", "aarch64": "x86_64"}[platform.machine()]


def _in_namespace(script: str, binfmt: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "bash", "-c", script],
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TORCHBAKE_BINFMT_DIR": str(binfmt)},
                          capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)


@pytest.fixture
def bare_binfmt(tmp_path):
    """An unmounted folder where the namespace's own binfmt_misc will be; skipped only where the
    kernel has no per-namespace binfmt_misc (older than 6.7), which this project's machines have."""
    folder = tmp_path / "binfmt_misc"
    folder.mkdir()
    probe = _in_namespace(f"mount -t binfmt_misc binfmt_misc {folder} && ls {folder}", folder)
    assert probe.returncode == 0, probe.stderr  # a kernel without it fails here, loudly
    assert probe.stdout.split() == ["register", "status"]  # empty: no handler at all
    return folder


def test_a_machine_without_update_binfmts_gets_its_handler_with_the_f_flag(bare_binfmt):
    hide = "mount --bind /dev/null /usr/sbin/update-binfmts && " if Path("/usr/sbin/update-binfmts").exists() else ""
    result = _in_namespace(f"{hide}bash scripts/ensure-emulation.sh && cat {bare_binfmt}/qemu-{MACHINE}", bare_binfmt)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"mounting binfmt_misc at {bare_binfmt}" in result.stdout
    handler = result.stdout.split("emulated (QEMU, F flag).\n", 1)[1].splitlines()
    assert handler[0] == "enabled"
    assert "F" in next(line for line in handler if line.startswith("flags:")).split(":", 1)[1]


def test_where_nothing_can_register_it_the_hint_is_a_command_that_exists_here(bare_binfmt, tmp_path):
    """No update-binfmts and no binfmt.d line: the message names what to install, with apt-get."""
    empty = tmp_path / "empty"
    empty.mkdir()
    hide = "mount --bind /dev/null /usr/sbin/update-binfmts && " if Path("/usr/sbin/update-binfmts").exists() else ""
    result = _in_namespace(f"{hide}mount --bind {empty} /usr/lib/binfmt.d && bash scripts/ensure-emulation.sh",
                           bare_binfmt)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"no QEMU handler for {MACHINE} in {bare_binfmt}; as root, run: apt-get install qemu-user-static"
            " binfmt-support") in result.stderr


def test_the_install_leaves_only_the_handlers_torchbake_uses_enabled(bare_binfmt, tmp_path):
    """qemu-user-static's install registers a handler for each of QEMU's machines, and BuildKit runs
    a check program under every one on each build: the script disables those the install added
    that torchbake does not use, and leaves one registered before the install as it was. The
    install here is a stand-in apt-get doing what the package's postinst does (registering from
    /usr/lib/binfmt.d), on the namespace's own binfmt_misc."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")  # neither package installed
    (fake / "apt-get").write_text(
        "#!/bin/sh\n[ \"$1\" = update ] && exit 0\n"
        f"for m in {MACHINE} riscv64 s390x; do grep '^:' /usr/lib/binfmt.d/qemu-$m.conf > {bare_binfmt}/register; done\n")
    for name in ("dpkg-query", "apt-get"):
        (fake / name).chmod(0o755)
    hide = "mount --bind /dev/null /usr/sbin/update-binfmts && " if Path("/usr/sbin/update-binfmts").exists() else ""
    script = (f"{hide}mount --bind {fake}/dpkg-query /usr/bin/dpkg-query && mount --bind {fake}/apt-get /usr/bin/apt-get"
              f" && mount -t binfmt_misc binfmt_misc {bare_binfmt}"
              f" && grep '^:' /usr/lib/binfmt.d/qemu-ppc64le.conf > {bare_binfmt}/register"  # the machine's own, before
              f" && bash scripts/ensure-emulation.sh && head -qn1 {bare_binfmt}/qemu-*")
    result = _in_namespace(script, bare_binfmt)
    assert result.returncode == 0, result.stdout + result.stderr
    states = dict(zip(sorted(["ppc64le", MACHINE, "riscv64", "s390x"]), result.stdout.split("\n")[-5:-1], strict=True))
    assert states == {MACHINE: "enabled", "ppc64le": "enabled", "riscv64": "disabled", "s390x": "disabled"}, result.stdout
    assert ("disabled 2 handlers the install registered that torchbake does not use (qemu-riscv64 qemu-s390x);"
            f" each is back with: echo 1 > {bare_binfmt}/qemu-NAME") in result.stdout


def test_a_module_the_suite_imported_once_has_its_bytecode_for_the_next_process():
    """Where PYTHONDONTWRITEBYTECODE is set (CI, these machines) Python never writes bytecode, and
    every `invoke` compiled its SDKs anew: scripts/test.sh unsets it for the suite (each module is
    compiled at its first import), and setup.sh compiles what it installed where it is set. Either
    way, once a process of the suite's environment imported a module, the next one reads its bytecode."""
    import importlib.util
    import subprocess
    import sys

    assert Path(sys.prefix) == ROOT / ".venv", sys.prefix  # the suite runs in setup.sh's environment
    subprocess.run([sys.executable, "-c", "import invoke, docker, rich, cyclonedx.model.bom, spdx_tools.spdx.model,"
                    " spdx_python_model, filelock, requests"], check=True, cwd=ROOT)
    missing = []
    for name in ("invoke", "docker", "rich", "cyclonedx.model.bom", "spdx_tools.spdx.model", "spdx_python_model",
                 "filelock", "requests"):
        source = importlib.util.find_spec(name).origin
        if not Path(importlib.util.cache_from_source(source)).is_file():
            missing.append(source)
    assert missing == [], f"no bytecode beside these sources (run: bash scripts/setup.sh): {missing}"


def test_the_suites_environment_got_its_pip_from_uv_not_from_ensurepip():
    """setup.sh makes .venv without pip where the outer pip can fill it (ensurepip's copy costs 5 to
    8 s of a fresh clone's set-up, before any test runs): uv installs pip into it with the rest."""
    import sys

    assert Path(sys.prefix) == ROOT / ".venv", sys.prefix
    installers = {p.parent.name: (p.read_text().strip() if p.is_file() else "none")
                  for p in (ROOT / ".venv").glob("lib/python3*/site-packages/pip-*.dist-info/INSTALLER")}
    assert list(installers.values()) == ["uv"], installers
