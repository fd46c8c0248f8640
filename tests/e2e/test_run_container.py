"""`invoke run-container`, `containers` and `stop-container` against the real engine, in the real
CPU release image: one-off commands, exit statuses, /dev/shm, DataLoader workers, container
reuse, and an interactive shell driven through a real terminal (tmux)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import ROOT, run_invoke
from torchbake.running.containers import user_name

from .helpers import copy_image, docker, engine_state, gpu_less, listing

DATALOADER_CHECK = '''
import os
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 20

    def __getitem__(self, i):
        return torch.full((256, 256), float(i))


if __name__ == "__main__":
    shm = os.statvfs("/dev/shm")
    print("shm", shm.f_frsize * shm.f_blocks)
    loader = DataLoader(Squares(), batch_size=4, num_workers=2)
    total = sum(batch[:, 0, 0].sum().item() for batch in loader)
    print("batches", len(loader), "total", int(total))
    print("mark", os.environ.get("TB_MARK"), "cwd", os.getcwd(), "torch", torch.__version__)
'''


@pytest.fixture
def image(cpu_image):
    name, result = cpu_image
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    return name


@pytest.fixture
def container_name(run_id):
    """A fresh container name; whatever the test made under it is removed afterwards."""
    names = []

    def make(purpose: str) -> str:
        names.append(f"tb-{purpose}-{run_id}-{uuid.uuid4().hex[:4]}")
        return names[-1]

    yield make
    for name in names:
        docker("rm", "--force", name, check=False)


def inspect(name: str) -> dict:
    return json.loads(docker("container", "inspect", name).stdout)[0]


def test_command_runs_in_a_throwaway_container_with_shm_mounts_and_dataloader_workers(image, tb_env, tmp_path):
    (tmp_path / "check.py").write_text(DATALOADER_CHECK)
    mark = uuid.uuid4().hex  # this run's container, told apart from other workers' of the shared image
    result = run_invoke("run-container", image, "--rm", "--shm-size", "2G", "--mount", f"{tmp_path}:/work:ro",
                        "--workdir", "/work", "--env", f"TB_MARK={mark}", "--command", "python check.py", env=tb_env)
    assert result.returncode == 0, result.stdout + result.stderr
    # stdout is the command's alone; torchbake's notes and docker commands go to stderr.
    assert result.stdout.splitlines() == [
        f"shm {2 << 30}", "batches 5 total 190", f"mark {mark} cwd /work torch 2.13.0+cpu"]
    assert "Running a throwaway container" in result.stderr and "--shm-size 2g" in result.stderr
    # --rm: nothing left behind. (The image is the run's, shared: other workers' containers of it come
    # and go meanwhile, as one did in a suite run, one even between the listing and its inspection;
    # only this one's must be gone.)
    found = docker("ps", "--all", "--quiet", "--no-trunc", "--filter", f"ancestor={image}").stdout.split()
    envs = [json.loads(docker("container", "inspect", "--format", "{{json .Config.Env}}", c, check=False).stdout.strip() or "[]")
            for c in found]
    assert not [env for env in envs if f"TB_MARK={mark}" in env], envs


@pytest.mark.parametrize("folder", ["a,b", 'say "hi"', "with space", "k=v,x=y", "données-日本", "a,\"b\" c=d é"])
def test_mounts_of_host_paths_with_commas_quotes_spaces_and_unicode(base_image, tb_env, tmp_path, folder):
    """Docker reads --mount as CSV: torchbake quotes the fields, so any host path mounts."""
    host = tmp_path / folder
    host.mkdir()
    (host / "mark.txt").write_text("mounted\n")
    result = run_invoke("run-container", base_image, "--rm", "--mount", f"{host}:/data/in,side:ro",
                        "--command", "cat '/data/in,side/mark.txt'", env=tb_env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "mounted\n"


def test_a_one_off_command_leaves_no_container_unless_kept_and_default_names_are_each_users(base_image, tb_env,
                                                                                          run_id):
    """`run-container IMAGE --command …` without --rm created a detached container (with its
    /dev/shm) and left it running; the default name (`<repository>-<tag>`) was everyone's."""
    image = f"tb-one-off-{run_id}:x"  # a name of this test's own: its containers are the ones to count
    docker("tag", base_image, image)

    def made() -> list[str]:
        return listing("ps", "--all", "--filter", f"label=torchbake.image={image}", "--format", "{{.Names}}").split()

    try:
        once = run_invoke("run-container", image, "--command", "echo hi", env=tb_env)
        assert once.returncode == 0 and once.stdout == "hi\n", once.stderr
        assert "removed when the command ends (--keep keeps it)" in once.stderr
        assert made() == []
        kept = run_invoke("run-container", image, "--command", "true", "--keep", env=tb_env)
        assert kept.returncode == 0, kept.stderr
        user = user_name()  # this machine's: root
        assert made() == [f"{user}-tb-one-off-{run_id}-x"]
        assert f"container {user}-tb-one-off-{run_id}-x is yours: the default name is your user name" in kept.stderr
        docker("stop", "--time", "1", made()[0])  # its bash, PID 1, ignores SIGTERM: killed after a second, not ten
        again = run_invoke("run-container", image, "--command", "echo in it", env=tb_env)  # stopped: started, stopped
        assert again.returncode == 0 and again.stdout == "in it\n", again.stderr
        assert "it is stopped again when the command ends" in again.stderr
        assert json.loads(docker("container", "inspect", made()[0]).stdout)[0]["State"]["Status"] == "exited"
        both = run_invoke("run-container", image, "--command", "true", "--keep", "--rm", env=tb_env)
        assert both.returncode == 2 and "--keep and --rm contradict each other" in both.stderr
    finally:
        for name in made():
            docker("rm", "--force", name, check=False)
        docker("image", "rm", image, check=False)


def test_exit_status_of_the_command_is_the_tasks(image, tb_env):
    result = run_invoke("run-container", image, "--rm", "--command", "echo bye; exit 7", env=tb_env)
    assert result.returncode == 7
    assert result.stdout == "bye\n"
    assert "the command exited with status 7" in result.stderr


def test_piped_input_reaches_the_command_and_output_keeps_its_streams(base_image, tb_env, container_name):
    """Without a terminal the session runs through the Engine API: standard input is forwarded
    (and closed at its end), stdout and stderr stay apart, and the exit status is the command's,
    in a throwaway container and in a named one alike."""
    data = "".join(f"line {i}\n" for i in range(5000))  # more than one socket buffer
    for flags in (["--rm"], ["--name", container_name("stdin")]):
        result = run_invoke("run-container", base_image, *flags, "--command", "wc -l; echo oops >&2; exit 3",
                            input=data, env=tb_env)
        assert result.returncode == 3, result.stderr
        assert result.stdout == "5000\n"
        assert "oops" in result.stderr and "oops" not in result.stdout
    quiet = run_invoke("run-container", base_image, "--rm", "--command", "sleep 2; echo done", env=tb_env)
    assert quiet.returncode == 0 and quiet.stdout == "done\n", quiet.stderr


def test_default_shm_is_large_and_small_ones_warn(image, tb_env):
    result = run_invoke("run-container", image, "--rm", "--command", "df --output=size -B1 /dev/shm | tail -1",
                        env=tb_env)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 1 << 30  # not Docker's 64 MB
    small = run_invoke("run-container", image, "--rm", "--shm-size", "256m", "--command", "true", env=tb_env)
    assert small.returncode == 0, small.stderr
    assert "warning: --shm-size 256m is under 1 GB" in small.stderr


def test_a_named_container_is_reused_started_refused_and_replaced(image, base_image, tb_env, container_name):
    name = container_name("reuse")
    first = run_invoke("run-container", image, "--name", name, "--command", "touch /made-here", "--keep", env=tb_env)
    assert first.returncode == 0, first.stderr
    assert f"Creating container {name}" in first.stderr
    made = inspect(name)
    assert made["Config"]["Labels"]["torchbake.container"] == "true"
    assert made["Config"]["Labels"]["torchbake.device-profile"] == "cpu"  # from the image's label
    assert made["HostConfig"]["ShmSize"] >= 1 << 30

    again = run_invoke("run-container", image, "--name", name, "--command", "test -f /made-here", env=tb_env)
    assert again.returncode == 0, again.stderr
    assert f"Running the command in running container {name}" in again.stderr
    assert inspect(name)["Id"] == made["Id"]

    nowhere = run_invoke("run-container", image, "--name", name, "--workdir", "/nonexistent", "--command",
                         "touch /ran-anyway", env=tb_env)
    assert nowhere.returncode == 2, nowhere.stdout + nowhere.stderr
    assert (f"run.workdir = '/nonexistent' (--workdir or [run] workdir): there is no such folder in container {name},"
            " so the command was not run") in nowhere.stderr
    assert "exited with status" not in nowhere.stderr
    assert docker("exec", name, "test", "-e", "/ran-anyway", check=False).returncode == 1

    listed = run_invoke("containers", env=tb_env)
    assert listed.returncode == 0 and name in listed.stdout and image in listed.stdout

    # named as the engine's inspect writes it, "/NAME" (its bash ignores SIGTERM: killed after 1 s)
    stopped = run_invoke("stop-container", f"/{name}", "--time", "1", env=tb_env)
    assert stopped.returncode == 0, stopped.stderr
    assert f"Stopped {name}." in stopped.stdout + stopped.stderr
    assert inspect(name)["State"]["Status"] == "exited"
    started = run_invoke("run-container", image, "--name", name, "--command", "test -f /made-here", "--keep",
                         env=tb_env)
    assert started.returncode == 0, started.stderr
    assert f"Starting stopped container {name}" in started.stderr
    assert inspect(name)["Id"] == made["Id"] and inspect(name)["State"]["Status"] == "running"

    other = run_invoke("run-container", base_image, "--name", name, "--command", "true", env=tb_env)
    assert other.returncode == 8
    assert f"was created from image '{image}', not '{base_image}' (a different image)" in other.stderr
    assert "--replace" in other.stderr
    resized = run_invoke("run-container", image, "--name", name, "--shm-size", "3G", "--command", "true", env=tb_env)
    assert resized.returncode == 8 and "--shm-size: it has" in resized.stderr
    assert inspect(name)["Id"] == made["Id"] and inspect(name)["State"]["Status"] == "running"

    replaced = run_invoke("run-container", base_image, "--name", name, "--replace", "--command", "cat /etc/debian_version",
                          env=tb_env)
    assert replaced.returncode == 0, replaced.stderr
    assert replaced.stdout.startswith("12")
    assert inspect(name)["Id"] != made["Id"]
    assert inspect(name)["Config"]["Image"] == base_image

    removed = run_invoke("stop-container", name, "--rm", "--time", "1", env=tb_env)
    assert removed.returncode == 0, removed.stderr
    assert docker("container", "inspect", name, check=False).returncode != 0


def test_stop_container_leaves_containers_it_did_not_create(base_image, tb_env, container_name):
    name = container_name("foreign")
    docker("create", "--name", name, base_image, "true")
    result = run_invoke("stop-container", name, "--rm", env=tb_env)
    assert result.returncode == 8
    assert "was not created by torchbake, so stop-container leaves it alone" in result.stderr
    assert inspect(name)["Name"] == f"/{name}"
    missing = run_invoke("stop-container", name + "-none", env=tb_env)
    assert missing.returncode == 2 and f"No container named '{name}-none'" in missing.stderr


def _pane(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait_for(session: str, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pane = _pane(session)
        if text in pane:
            return pane
        time.sleep(0.3)
    raise AssertionError(f"{text!r} did not appear in the terminal within {timeout} s:\n{_pane(session)}")


def test_interactive_shell_through_a_real_terminal(image, tb_env, container_name, tmp_path):
    assert shutil.which("tmux"), "tmux is missing: scripts/setup.sh installs it"
    name = container_name("tty")
    status_file = tmp_path / "status"
    script = tmp_path / "session.sh"
    env = " ".join(f"{k}={v}" for k, v in tb_env.items())
    script.write_text(
        f"cd {ROOT}\n"
        f"env {env} {sys.executable} -m invoke run-container {image} --name {name}\n"
        f"echo $? > {status_file}\n"
        "sleep 600\n"
    )
    session = f"torchbake-{name}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", f"bash {script}"], check=True)
    try:
        _wait_for(session, f"root@{name}:/#")  # the prompt of a real shell in the container
        subprocess.run(["tmux", "send-keys", "-t", session, 'python -c "import torch; print(torch.__version__)"',
                        "Enter"], check=True)
        _wait_for(session, "2.13.0+cpu")
        # Ctrl-C reaches the shell in the container (it ends `sleep`, not the session).
        subprocess.run(["tmux", "send-keys", "-t", session, "sleep 300", "Enter"], check=True)
        time.sleep(1)
        subprocess.run(["tmux", "send-keys", "-t", session, "C-c"], check=True)
        subprocess.run(["tmux", "send-keys", "-t", session, "echo still-$((40+2))", "Enter"], check=True)
        _wait_for(session, "still-42")
        subprocess.run(["tmux", "send-keys", "-t", session, "exit 3", "Enter"], check=True)
        deadline = time.monotonic() + 30
        while not status_file.exists() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert status_file.read_text().strip() == "3", _pane(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    assert inspect(name)["State"]["Status"] == "running"  # the container outlives the shell


def test_the_gpu_less_view_shows_no_gpu_and_leaves_nothing_in_the_temporary_folder(tmp_path):
    """The view the bad inputs below run in: /dev holds the few nodes a program needs, the host's
    shm and no GPU's, and the folder it bound the host's /dev to is gone (it was left in the shared
    /tmp at every command, seven a run); with a temporary folder under /dev (the suite's, in
    /dev/shm), the view still works."""
    temp = tmp_path / "temp"
    temp.mkdir()
    seen = subprocess.run(gpu_less(["ls", "/dev"]), capture_output=True, text=True, check=True,
                          env={**os.environ, "TMPDIR": str(temp)})
    assert sorted(seen.stdout.split()) == ["full", "null", "random", "shm", "urandom", "zero"]
    assert list(temp.iterdir()) == []
    in_shm = subprocess.run(gpu_less(["sh", "-c", 'ls "$TMPDIR"']), capture_output=True, text=True,
                            env={**os.environ, "TMPDIR": "/dev/shm"})
    assert in_shm.returncode == 0, in_shm.stderr


@pytest.fixture(scope="module")
def gpu_less_engine(second_engine, base_image):
    """The second engine (no GPU runtimes) with the session's base image: what the device profiles
    meet on a host without GPUs, whatever this machine has."""
    copy_image(base_image, second_engine)
    return dict(second_engine)


@pytest.mark.parametrize(("args", "message", "code"), [
    (["IMAGE", "--env", "9LIVES=1"], "'9LIVES' is not a valid environment variable name", 2),
    (["IMAGE", "--mount", "relative-only"], "--mount 'relative-only' is invalid: expected HOST:CONTAINER", 2),
    (["IMAGE", "--shm-size", "0"], "run.shm_size = '0'", 2),
    (["IMAGE", "--device-profile", "ipu"], "run.device_profile = 'ipu' (from command line) is invalid: expected one of: cpu, cuda, rocm, musa, ascend, tpu, xpu (or \"\" for the image's profile)", 2),
    (["IMAGE", "--device-profile", "cuda"], "The cuda device profile needs the NVIDIA Container Toolkit", 8),
    (["IMAGE", "--device-profile", "rocm"], "The rocm device profile needs /dev/kfd and /dev/dri on this host", 8),
    (["IMAGE", "--device-profile", "musa"], "The musa device profile needs a Moore Threads GPU", 8),
])
def test_bad_inputs_fail_before_anything_is_created(gpu_less_engine, base_image, tb_env, args, message, code):
    """With their exit codes, on a host without GPUs (tests.e2e.helpers.gpu_less: on any machine);
    more run-container cases are in the catalogue (test_bad_inputs.py)."""
    args = [base_image if a == "IMAGE" else a for a in args]
    before = engine_state([base_image, *args], env=gpu_less_engine)
    result = run_invoke("run-container", *args, "--command", "true", env={**tb_env, **gpu_less_engine}, wrap=gpu_less)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert engine_state([base_image, *args], env=gpu_less_engine) == before
