"""scripts/ensure-engine.sh waits for the engine it starts as long as the engine lives, not a fixed
number of tries: on a machine whose engine holds a day of builds the start takes more than a
minute (a CI run failed so: "did not answer within 60 s" while the engine was still starting). An
engine that dies is said at once, with its log. Stand-ins: an engine (a script under a name of its
own, so that the real engine's process is not taken for it) that answers once a file exists, and
its client, which answers when the engine has made that file."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from torchbake.planning.config import resolve


@pytest.fixture
def engine(tmp_path):
    """The stand-in engine's and client's paths, and the environment that points the script at them."""
    ready, pidfile = tmp_path / "ready", tmp_path / "engine.pid"
    client = tmp_path / "docker"
    client.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in
            version) [ -f {ready} ] && echo 26.1.5 ;;
            buildx) exit 0 ;;
            info) echo '[[driver-type io.containerd.snapshotter.v1]]' ;;
        esac
        """))
    daemon = tmp_path / f"tbd-{uuid.uuid4().hex[:8]}"  # comm is at most 15 characters: pgrep -x must see it whole
    daemon.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        [ "$1" = --version ] && {{ echo 'Docker version 26.1.5, build stand-in'; exit 0; }}
        echo $$ > {pidfile}
        echo "Starting up"
        [ -n "$DIE" ] && {{ echo "failed to start daemon: $DIE"; exit 1; }}
        sleep "$START_S"
        [ -n "$HOLD" ] && while [ ! -f "$HOLD" ]; do sleep 0.05; done
        touch {ready}
        exec sleep 300
        """))
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "containerd").symlink_to("/bin/true")
    for script in (client, daemon):
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}", "TORCHBAKE_ENGINE_CLIENT": str(client),
           "TORCHBAKE_DOCKERD": str(daemon), "TORCHBAKE_DOCKERD_LOG": str(tmp_path / "engine.log"),
           "TORCHBAKE_DOCKERD_SETTINGS": str(tmp_path / "daemon.json")}
    yield daemon, env
    if pidfile.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def ensure_engine(env: dict[str, str], **extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "scripts" / "ensure-engine.sh")], capture_output=True, text=True,
                          env={**env, **extra}, timeout=60, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - began


def test_an_engine_slow_to_start_is_waited_for(engine):
    daemon, env = engine
    done, _ = ensure_engine(env, START_S="1.2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"starting {daemon.name} in the background" in done.stdout
    assert "the engine answers (Docker 26.1.5" in done.stdout


def test_an_engine_that_does_not_answer_in_the_time_given_is_said_with_its_log(engine):
    daemon, env = engine
    done, took = ensure_engine(env, START_S="30", TORCHBAKE_ENGINE_WAIT_S="1")
    assert done.returncode == 1
    assert f"{daemon.name} (pid " in done.stderr and "did not answer within 1 s (TORCHBAKE_ENGINE_WAIT_S)" in done.stderr
    assert "Starting up" in done.stderr  # the log's start
    assert took < 15


def test_an_engine_that_dies_is_said_at_once(engine):
    daemon, env = engine
    done, took = ensure_engine(env, DIE="no space left on device")
    assert done.returncode == 1
    assert f"{daemon.name} (pid " in done.stderr and "exited after" in done.stderr
    assert "failed to start daemon: no space left on device" in done.stderr
    assert took < 15  # not the 600 s given to a live engine


def test_an_engine_already_starting_is_waited_for_not_started_again(engine, tmp_path):
    """The stand-in answers only once the script has said it waits for it (the file ``go``)."""
    daemon, env = engine
    go = tmp_path / "go"
    running = subprocess.Popen([str(daemon)], env={**env, "START_S": "0", "HOLD": str(go)},
                               stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "engine.pid").exists():
            assert time.monotonic() < deadline, "the stand-in engine did not start in 30 s"
            time.sleep(0.05)
        with subprocess.Popen(["bash", str(ROOT / "scripts" / "ensure-engine.sh")], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env, stdin=subprocess.DEVNULL) as script:
            first = script.stdout.readline()
            go.touch()
            rest = script.stdout.read()
            assert script.wait(timeout=60) == 0, first + rest
        assert first == f"ensure-engine: {daemon.name} is running (pid {running.pid}); waiting for it to answer\n"
        assert "starting" not in rest and "the engine answers" in rest
    finally:
        os.killpg(running.pid, signal.SIGKILL)
        running.wait()


def test_the_set_up_scripts_variables_leave_invoke_working():
    """A user who set TORCHBAKE_DOCKERD_LOG (docs/troubleshooting.md) for ensure-engine.sh, or any
    other variable of the set-up scripts, still runs invoke: torchbake takes TORCHBAKE_* names for
    its options and refuses unknown ones, but not these."""
    names = sorted({name for script in (ROOT / "scripts").glob("*.sh")
                    for name in re.findall(r"\$\{?(TORCHBAKE_[A-Z_]+)", script.read_text())})
    assert "TORCHBAKE_DOCKERD_LOG" in names and "TORCHBAKE_DEV_WHEELS" in names
    resolve(environ=dict.fromkeys(names, "1"))


@pytest.mark.parametrize("wait", ["10m", "0", "-5", "99999999999999999999"])
def test_a_time_to_wait_that_is_not_whole_seconds_is_refused_before_anything(engine, wait):
    daemon, env = engine
    done, _ = ensure_engine(env, TORCHBAKE_ENGINE_WAIT_S=wait)
    assert done.returncode == 2
    assert done.stderr == f"ensure-engine: TORCHBAKE_ENGINE_WAIT_S={wait}: expected whole seconds, 1 to 999999 (the default is 600)\n"
    assert done.stdout == ""


def test_a_dead_engine_not_yet_reaped_is_not_taken_for_a_running_one(engine):
    """Where nothing reaps the dead (a container's first process that is not an init), a dead
    engine stays listed, a zombie: it is not waited for, a new one is started."""
    daemon, env = engine
    dead = subprocess.Popen([str(daemon)], env={**env, "DIE": "gone"}, stdout=subprocess.DEVNULL)
    try:
        while Path(f"/proc/{dead.pid}/stat").read_text().split(") ")[1][0] != "Z":  # dead, not reaped: not waited for
            time.sleep(0.05)
        done, _ = ensure_engine(env, START_S="0.2")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"starting {daemon.name} in the background" in done.stdout
    finally:
        dead.wait()
