"""The suite's commands are forked from a server that has imported invoke (tests/forked_invoke.py):
each must be the command a fresh `python -m invoke` would have been."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import INVOKE, ROOT, forked_invoke_server
from tests.forked_invoke import SET_AGAIN, client_command


def fresh(args: list[str], env: dict[str, str], cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INVOKE, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args, env", [
    (["--list"], {}),
    (["show-config", "--config", "../configs/cuda.toml"], {"TORCHBAKE_NAME": "team/torch"}),
    (["build", "--python", "3.99", "--dry-run"], {}),  # refused: exit 2, the message on stderr
])
def test_a_forked_command_is_the_command_a_fresh_process_runs(args, env, tmp_path):
    """Same exit status, output and error output, with the command's environment and folder (a
    relative --config is read from it): break become() (the environment, the folder, the streams)
    and these differ."""
    cwd = ROOT / "docs" if any(a.startswith("../") for a in args) else ROOT
    full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")},
                "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path), **env}
    argv = ["--search-root", str(ROOT), *args]
    expected = fresh(argv, full_env, cwd)
    forked, cpu = forked_invoke_server().run([*INVOKE, *argv], argv, env=full_env, cwd=cwd, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (expected.returncode, expected.stdout, expected.stderr)
    assert forked.stdout or forked.stderr
    assert cpu > 0


def test_the_client_runs_the_command_in_its_own_streams_environment_and_folder(tmp_path):
    """``forked_invoke.py --client SOCKET ARGS`` (the benchmarks' smoke runs): the command a fresh
    `python -m invoke` runs, its output in the client's own streams, its exit status the client's."""
    server = forked_invoke_server()
    server.start()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")},
           "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path)}
    for args in (["show-config", "--config", "../configs/cpu.toml"], ["build", "--python", "2.7"]):
        argv = ["--search-root", str(ROOT), *args]
        expected = fresh(argv, env, ROOT / "docs")
        client = subprocess.run([*client_command(server.path), *argv],
                                capture_output=True, text=True, env=env, cwd=ROOT / "docs", stdin=subprocess.DEVNULL,
                                timeout=120)
        assert (client.returncode, client.stdout, client.stderr) == (expected.returncode, expected.stdout, expected.stderr)
        assert client.stdout or client.stderr
    assert expected.returncode == 2  # the second: a bad --python, said on the client's error output


SCRATCH_TASKS = """
import os, time
from pathlib import Path
from invoke import task

@task
def parent(c):
    print(os.getppid())

@task
def wait(c, pidfile):
    Path(pidfile).write_text(str(os.getpid()))
    time.sleep(60)
"""


def test_the_clients_command_is_forked_from_the_server_and_ends_with_it_by_signal(tmp_path):
    """The client's command is the server's child (not a fresh Python); killed, the client ends by
    the same signal; a SIGTERM the client gets goes to its command."""
    import signal
    import time

    server = forked_invoke_server()
    server.start()
    (tmp_path / "tasks.py").write_text(SCRATCH_TASKS)
    run = [*client_command(server.path), "--search-root", str(tmp_path)]
    parent = subprocess.run([*run, "parent"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert parent.returncode == 0 and int(parent.stdout) == server.server.pid, (parent.stdout, parent.stderr)

    def started(pidfile):
        client = subprocess.Popen([*run, "wait", "--pidfile", str(pidfile)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd=tmp_path)
        deadline = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < deadline and client.poll() is None, "the command never started"
            time.sleep(0.05)
        return client, int(pidfile.read_text())

    client, command = started(tmp_path / "killed.pid")
    os.kill(command, signal.SIGKILL)
    assert client.wait(timeout=30) == -signal.SIGKILL
    client, command = started(tmp_path / "terminated.pid")
    client.terminate()  # forwarded to the command
    assert client.wait(timeout=30) == -signal.SIGTERM
    deadline = time.monotonic() + 30
    while running(command):
        assert time.monotonic() < deadline, "the command outlived the client's SIGTERM"
        time.sleep(0.05)


def running(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie is not; one reaped while its state is read neither)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_command_past_its_timeout_is_killed_and_said_as_subprocess_says_it():
    with pytest.raises(subprocess.TimeoutExpired):
        forked_invoke_server().run([*INVOKE, "--list"], ["--list"], env=dict(os.environ), cwd=ROOT, timeout=0.001)
    again, _ = forked_invoke_server().run([*INVOKE, "--list"], ["--list"], env=dict(os.environ), cwd=ROOT, timeout=120)
    assert again.returncode == 0 and "build-all" in again.stdout


# A module that reads the clock, the environment, the process or the folder at import would see the
# server's, not the command's: only those the server sets again in each child (SET_AGAIN) may.
READS_THE_PROCESS = ("time.", "os.environ", "os.getenv", "os.getpid", "os.getcwd", "Path.cwd", "Path.home",
                     "datetime.")


def test_no_module_reads_the_process_at_import_but_those_the_server_sets_again():
    found = set()
    for path in sorted((ROOT / "torchbake").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                names = {ast.unparse(sub) for sub in ast.walk(node.value) if isinstance(sub, ast.Attribute)}
                if any(name.startswith(READS_THE_PROCESS) for name in names):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    found |= {(relative, ast.unparse(target)) for target in targets}
    assert found == {(module.replace(".", "/") + ".py", name) for module, name in SET_AGAIN}


def test_a_build_s_sbom_writers_import_nothing_the_server_has_not_imported():
    """The server imports what torchbake's functions import when they run, a module a `from
    PACKAGE import MODULE` names too (SPDX 3's bindings, 0.2 s of CPU a build where each child
    imported them again): with all of it imported, a build's three SBOMs import nothing more."""
    script = ("import sys, importlib\n"
              "from tests import forked_invoke\n"
              "for name in forked_invoke.preloaded():\n"
              "    importlib.import_module(name)\n"
              "from tests.unit.test_sbom import image, INPUTS\n"
              "from torchbake.supply_chain import sbom_formats\n"
              "before = set(sys.modules)\n"
              "sbom_formats.documents(image(), INPUTS, tool_version='0.1.0')\n"
              "print(sorted(set(sys.modules) - before))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout
