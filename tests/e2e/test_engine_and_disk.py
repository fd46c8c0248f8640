"""Disk and engine trouble: a build that cannot fit fails before any download, with the figures;
an engine that stops answering mid-run is a clear error within the configured timeout, not a hang."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import run_invoke
from tests.support import http_server, relay

from .helpers import docker, engine_state

REAL_SOCKET = "/var/run/docker.sock"


@pytest.fixture
def small_disk(tmp_path):
    """A real 20 MB file system (tmpfs)."""
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def test_a_build_that_cannot_fit_fails_before_downloading(base_image, small_disk, tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    (www / "kit.tar.gz").write_bytes(b"\0" * (30 << 20))
    cache = small_disk / "cache"
    before = engine_state([base_image, "torchbake/pytorch-cpu"])
    with http_server(www) as url:
        result = run_invoke("build", "--config", "configs/cpu.toml", "--tag", "no-room", "--base-img", base_image,
                            "--musa-toolkits-url", f"{url}/kit.tar.gz",
                            env={"TORCHBAKE_PATHS_CACHE_DIR": str(cache), "TORCHBAKE_BUILD_MIN_FREE_SPACE": "1M"})
    assert result.returncode == 9, result.stdout + result.stderr
    message = result.stderr
    assert "Not enough free disk space for this build (checked before any download):" in message
    assert f"{cache}: needs about 31.5 MB (downloads 31.5 MB (inputs not cached yet)) + 1.0 MB kept free" in message
    assert "has 2" in message and "MB free" in message  # about 20 MB
    assert "Preparing the build context" not in result.stdout
    assert not list(cache.rglob("kit.tar.gz*")) and not list(cache.rglob("*.part"))
    assert engine_state([base_image, "torchbake/pytorch-cpu"]) == before


@contextmanager
def engine_that_stops_answering(folder: Path):
    """A socket in front of the real engine that answers the version checks (/_ping, /version)
    and then never answers anything else: an engine hanging mid-run."""
    path = folder / "hanging-docker.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    stop = threading.Event()
    held: list[socket.socket] = []

    def forward(method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        upstream = http.client.HTTPConnection("localhost")
        upstream.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.sock.connect(REAL_SOCKET)
        upstream.request(method, target, body=body or None, headers={k: v for k, v in headers.items() if k.lower() != "connection"})
        response = upstream.getresponse()
        data = response.read()
        head = [f"HTTP/1.1 {response.status} {response.reason}"]
        head += [f"{k}: {v}" for k, v in response.getheaders() if k.lower() not in ("transfer-encoding", "content-length", "connection")]
        head += [f"Content-Length: {len(data)}", "", ""]
        upstream.close()
        return "\r\n".join(head).encode() + (data if method != "HEAD" else b"")

    def serve(conn: socket.socket) -> None:
        held.append(conn)
        buffer = b""
        with conn:
            while not stop.is_set():
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
                length = int(headers.get("Content-Length", 0))
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                if target.endswith(("/_ping", "/version")):
                    conn.sendall(forward(method, target, headers, body))
                else:
                    stop.wait()  # never answers
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"unix://{path}"
    finally:
        stop.set()
        server.close()


def test_an_engine_that_stops_answering_is_an_error_not_a_hang(base_image, tiny_profile, tmp_path):
    matrix = tmp_path / "nightly.toml"
    matrix.write_text(f'[matrix]\nprofiles = ["{tiny_profile}"]\npythons = ["3.11"]\nvariants = ["release"]\n'
                      f'name = "torchbake-test/hang"\ntag = "{{variant}}"\n[matrix.options.release]\n"image.base" = "{base_image}"\n')
    build = ["build", "--config", str(tiny_profile), "--name", "torchbake-test/hang", "--base-img", base_image]
    with engine_that_stops_answering(tmp_path) as host:
        env = {"DOCKER_HOST": host, "TORCHBAKE_BUILD_ENGINE_TIMEOUT": "3", "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cache")}

        def timed(args: list[str]):
            started = time.monotonic()
            return args, run_invoke(*args, env=env, timeout=120), time.monotonic() - started

        # side by side: each waits out its timeout, the engine's answer that never comes
        with ThreadPoolExecutor(max_workers=6) as commands:
            done = list(commands.map(timed, (["verify", base_image], ["run-container", base_image, "--rm", "--command", "true"],
                                             ["containers"], build, ["build-all", "--config", str(matrix)], ["gc"])))
        for args, result, seconds in done:
            assert result.returncode == 4, (args, result.stdout + result.stderr)
            output = result.stdout + result.stderr  # build-all: the cell's error in its summary line
            assert "did not answer" in output and "within 3 s" in output, (args, output)
            assert "Traceback" not in output
            assert seconds < 30, (args, seconds)


def test_a_container_runs_as_long_as_a_build_step_may_and_no_longer(base_image, run_id, tmp_path):
    """verify's probe container may run [build] stall_timeout seconds (under QEMU `import torch` of
    a CUDA build takes more than ten minutes), then it is stopped, removed, and the error says which
    setting to raise."""
    image = f"torchbake-test/slow-python:{run_id}"
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN printf '#!/bin/sh\\nsleep 300\\n'"
                                         " > /usr/local/bin/python && chmod +x /usr/local/bin/python\n")
    docker("build", "--tag", image, str(tmp_path))
    try:
        started = time.monotonic()
        result = run_invoke("verify", image, env={"TORCHBAKE_BUILD_STALL_TIMEOUT": "10"}, timeout=120)
        seconds = time.monotonic() - started
        output = result.stdout + result.stderr
        assert result.returncode == 4, output
        assert "ran longer than 10 s ([build] stall_timeout) and was stopped" in output, output
        assert "TORCHBAKE_BUILD_STALL_TIMEOUT=SECONDS" in output and "Traceback" not in output, output
        assert 10 <= seconds < 40, seconds
        assert not docker("ps", "--all", "--quiet", "--filter", f"ancestor={image}").stdout.strip()
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_files_are_read_from_an_image_that_never_runs(base_image, run_id, tmp_path):
    """/etc/os-release and dpkg's status (a base image's release, its Debian packages) are read from
    a container created and never started: in an image without `cat` or a shell, through Debian's
    link /etc/os-release -> ../usr/lib/os-release and a link to that link; a missing file is None;
    no container is left."""
    from torchbake.adapters.engine import DockerClient
    from torchbake.supply_chain.inventory import DPKG_STATUS, debs_of
    from torchbake.variants.common import os_release_of

    image = f"torchbake-test/nothing-runs:{run_id}"
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nRUN ln -s /etc/os-release /etc/second-link"
                                         " && rm /usr/bin/cat /bin/sh /bin/bash /bin/dash\n")
    docker("build", "--tag", image, str(tmp_path))
    try:
        client = DockerClient(binary="/usr/bin/docker", version="", build_mode="none", environ=dict(os.environ))
        image_id = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        release = os_release_of(client, image, image_id, tmp_path / "cache")
        assert release["ID"] == "debian" and release["VERSION_ID"] == "12", release
        assert client.read_file(image, "/etc/second-link") == client.read_file(image, "/usr/lib/os-release")
        assert client.read_file(image, "/etc/no-such-file") is None
        assert "Package: libc6" in client.read_file(image, DPKG_STATUS)
        assert "libc6" in {deb.name for deb in debs_of(client, image)}
        assert not docker("ps", "--all", "--quiet", "--filter", f"ancestor={image}").stdout.strip()
    finally:
        docker("image", "rm", "--force", image, check=False)


@contextmanager
def second_socket(folder: Path):
    """Another socket path to the real engine (a byte relay that counts its connections)."""
    path = folder / "second-docker.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    connections: list[socket.socket] = []
    opened: list[socket.socket] = []

    def accept() -> None:
        nonlocal opened
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            connections.append(conn)
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            opened += [conn, upstream]
            upstream.connect(REAL_SOCKET)
            threading.Thread(target=relay, args=(conn, upstream), daemon=True).start()
            threading.Thread(target=relay, args=(upstream, conn), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield path, connections
    finally:
        server.close()
        for end in opened:
            end.close()


@pytest.mark.quick
def test_the_engine_is_found_as_the_cli_finds_it(base_image, tmp_path):
    """The default socket; a unix:// DOCKER_HOST naming a second socket path; a docker context
    naming it: each reaches the engine (the relay sees the calls where it should)."""
    with second_socket(tmp_path) as (path, connections):
        plain = run_invoke("show-build", base_image, env={"DOCKER_CONFIG": str(tmp_path / "cfg")})
        assert plain.returncode == 0, plain.stderr
        assert connections == []  # the default socket, not the relay

        host = run_invoke("show-build", base_image, env={"DOCKER_HOST": f"unix://{path}"})
        assert host.returncode == 0, host.stderr
        assert len(connections) >= 1
        seen = len(connections)

        config = {"DOCKER_CONFIG": str(tmp_path / "cfg")}
        created = subprocess.run(["/usr/bin/docker", "context", "create", "torchbake-second",
                                  "--docker", f"host=unix://{path}"], env={**os.environ, **config},
                                 capture_output=True, text=True)
        assert created.returncode == 0, created.stderr
        by_context = run_invoke("show-build", base_image, env={**config, "DOCKER_CONTEXT": "torchbake-second"})
        assert by_context.returncode == 0, by_context.stderr
        assert len(connections) > seen
        assert base_image in by_context.stdout

        current = run_invoke("show-build", base_image, env=config | {"DOCKER_CONTEXT": "no-such-context"})
        assert current.returncode == 4 and "Traceback" not in current.stderr, current.stderr


def test_the_suites_summary_finds_the_engines_daemons_by_their_pidfiles():
    """The run's summary gives the engine's daemons' CPU (tests/module_budget.py): their pidfiles
    are the ones scripts/ensure-engine.sh's engine writes, each naming its running daemon."""
    from tests.module_budget import daemon_cpu

    found = daemon_cpu()
    assert set(found) == {"dockerd", "containerd"}, found
    for name, (pid, seconds) in found.items():
        assert Path(f"/proc/{pid}/comm").read_text().strip() == name and seconds > 0, (name, pid, seconds)
