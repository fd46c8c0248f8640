"""Test support shared by unit and real-engine tests."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

# The settings scripts/ensure-engine.sh gives an engine it starts (merged into daemon.json).
ENGINE_SETTINGS = Path(__file__).resolve().parent.parent / "scripts" / "engine-settings.json"
# The machine's folder of the test tools' own files, kept between runs (as scripts/setup.sh names it):
# torchbake's dependency wheels, the team CA of the trust tests
DEV_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchbake-dev"


@contextmanager
def serving(httpd: http.server.HTTPServer):
    """``httpd`` answering in a thread of its own until the block ends."""
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def http_server(root: Path):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with serving(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}"


class _GitHandler(http.server.BaseHTTPRequestHandler):
    """Smart-HTTP git through `git http-backend`; paths under /private/ need Basic auth."""

    project_root: Path
    auth: str  # "user:password" expected for /private/
    seen_auth: list

    def log_message(self, *args):
        pass

    def _serve(self) -> None:
        import base64
        import os
        import subprocess
        import urllib.parse

        path, _, query = self.path.partition("?")
        if path.startswith("/private/"):
            header = self.headers.get("Authorization", "")
            self.seen_auth.append(header)
            expected = "Basic " + base64.b64encode(self.auth.encode()).decode()
            if header != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="torchbake-tests"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            **os.environ,
            "GIT_PROJECT_ROOT": str(self.project_root), "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": urllib.parse.unquote(path), "QUERY_STRING": query,
            "REQUEST_METHOD": self.command, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        result = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode().split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _serve
    do_POST = _serve


@contextmanager
def git_server(project_root: Path, auth: str = "builder:s3cret"):
    """Serve the bare repositories under ``project_root`` over smart HTTP on 127.0.0.1."""
    handler = type("Handler", (_GitHandler,), {"project_root": project_root, "auth": auth, "seen_auth": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with serving(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler.seen_auth


@contextmanager
def flaky_server(payload: bytes, script: list[str], *, ranges: bool = True, tls: tuple[Path, Path] | None = None):
    """An HTTP(S) server on 127.0.0.1 serving ``payload`` at any path, misbehaving as ``script``
    says, one entry per request: "drop" (close without answering), "503", "404", "truncate" (half
    the body, then close), "stall" (answer after 3 s), "ok". Requests after the script get "ok".
    Yields (url, seen), seen being each request's Range header ("" for none)."""
    import ssl
    import time

    seen: list[str] = []
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            with lock:
                action = script.pop(0) if script else "ok"
                seen.append(self.headers.get("Range", ""))
            if action == "drop":
                self.close_connection = True
                return
            if action in ("503", "404"):
                self.send_response(int(action))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if action == "stall":
                time.sleep(3)
            start = 0
            requested = self.headers.get("Range", "")
            if ranges and requested.startswith("bytes=") and action != "truncate":
                start = int(requested[len("bytes="):].split("-")[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(payload) - 1}/{len(payload)}")
            else:
                self.send_response(200)
            body = payload[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if action == "truncate":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client that gave up on a stall
                self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certfile=str(tls[0]), keyfile=str(tls[1]))
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    with serving(httpd):
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}", seen


def make_test_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl CLI):
    returns (ca.pem, server.pem, server.key)."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=torchbake test proxy CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"


def relay(source, target) -> None:
    """Copy bytes from ``source`` to ``target`` until either end closes; then shut both down."""
    import socket

    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        return
    finally:
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


@contextmanager
def tcp_listener(handle):
    """A TCP listener on 127.0.0.1 that hands each connection it accepts to ``handle``, until the
    block ends. Yields "127.0.0.1:PORT"."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def accept_each() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            handle(client)

    threading.Thread(target=accept_each, daemon=True).start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def reset_connection(sock) -> None:
    """Close ``sock`` with a TCP reset (SO_LINGER 0), as a peer that died does."""
    import struct

    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def forward(client, upstream: str, upward, downward) -> None:
    """Connect ``client`` to ``upstream`` (host:port): ``upward(client, server)`` and
    ``downward(server, client)``, each in a thread of its own, carry the two directions."""
    host, port = upstream.rsplit(":", 1)
    server = socket.create_connection((host, int(port)))
    threading.Thread(target=upward, args=(client, server), daemon=True).start()
    threading.Thread(target=downward, args=(server, client), daemon=True).start()


@contextmanager
def faulty_proxy(upstream: str, faults: list[str]):
    """A TCP proxy on 127.0.0.1 in front of ``upstream`` (host:port) that spends ``faults`` in
    order, one per new connection, then forwards everything: "reset" closes the connection with a
    TCP reset before reading it, "503" answers its first request 503 Service Unavailable, and
    "401" answers every request on every connection 401 with a Basic challenge (a registry that
    wants credentials). ``faults`` is spent in place. Yields "127.0.0.1:PORT"."""
    pending = faults  # spent in place: the caller sees which faults were met
    deny = "401" in faults

    def pipe(source, target):
        relay(source, target)
        source.close()  # each socket is the source of one pipe: closed once, by it

    def answer(client, status: str, extra: str = "") -> None:
        with contextlib.suppress(OSError):
            client.recv(65536)
            client.sendall(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n{extra}\r\n".encode())
        client.close()

    def handle(client):
        fault = "401" if deny else (pending.pop(0) if pending else "")
        if fault == "reset":
            reset_connection(client)
        elif fault == "503":
            threading.Thread(target=answer, args=(client, "503 Service Unavailable"), daemon=True).start()
        elif fault == "401":
            threading.Thread(target=answer, args=(client, "401 Unauthorized", 'WWW-Authenticate: Basic realm="test"\r\n'),
                             daemon=True).start()
        else:
            forward(client, upstream, pipe, pipe)

    with tcp_listener(handle) as address:
        yield address


@contextmanager
def dying_proxy(upstream: str, last_words: bytes = b"POST /v2/"):
    """A TCP proxy on 127.0.0.1 in front of ``upstream`` that forwards everything until a client
    sends ``last_words`` (by default: a push starts its first blob upload), then stops answering:
    that connection and every later one are reset. A registry that dies in the middle of a push.
    Yields "127.0.0.1:PORT"."""
    dead = threading.Event()

    def upward(client, server) -> None:
        try:
            while data := client.recv(65536):
                if dead.is_set() or last_words in data:
                    dead.set()
                    break
                server.sendall(data)
        except OSError:
            pass
        reset_connection(client)
        reset_connection(server)

    def handle(client):
        if dead.is_set():
            reset_connection(client)
            return
        forward(client, upstream, upward, relay)

    with tcp_listener(handle) as address:
        yield address


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def await_listening(process: subprocess.Popen, port: int, what: str, seconds: int = 10, log: str = "") -> None:
    """Wait until ``process`` listens on 127.0.0.1:``port``; one that stops first, or does not listen
    within ``seconds``, fails the test naming ``what`` (and ``log``: where its own output is); a
    process that never listens is killed."""
    for _ in range(seconds * 10):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert process.poll() is None, f"{what} stopped (status {process.returncode}){log}"
            time.sleep(0.1)
    process.kill()
    process.wait(timeout=10)
    raise AssertionError(f"{what} did not listen on 127.0.0.1:{port} within {seconds} s{log}")


@contextmanager
def serve_registry(folder: Path, log: Path | None = None):
    """A real local registry (Debian's docker-registry) on 127.0.0.1; its access log in ``log``."""
    port = free_port()
    config = folder / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n"
        "    rootdirectory: " + str(folder / "data") + f"\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    with open(log or os.devnull, "ab") as sink:
        process = subprocess.Popen([shutil.which("docker-registry") or "/usr/bin/docker-registry", "serve", str(config)],
                                   stdout=sink, stderr=sink)
    await_listening(process, port, "docker-registry", log=f"; its log: {log}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


class SecondEngine(dict):
    """{"DOCKER_HOST": ...} of a second engine, which can be killed and started again on the same
    data root (a fault in the middle of the night)."""

    def __init__(self, root: Path, short: Path, bridge: str):
        super().__init__(DOCKER_HOST=f"unix://{short}/docker.sock")
        self.root, self.short, self.bridge, self.process, self.starts = root, short, bridge, None, 0

    def start(self) -> None:
        """Start dockerd on the data root; after a kill, with a fresh exec root (runtime state
        lives under /run, which a machine whose engine crashed starts empty after its reboot)."""
        self.starts += 1
        log = self.root / "dockerd.log"
        settings = self.root / "daemon.json"  # not the host's /etc/docker/daemon.json: no GPU runtimes, no pools
        settings.write_text(ENGINE_SETTINGS.read_text())  # as scripts/ensure-engine.sh sets the engine up
        with open(log, "ab") as sink:
            self.process = subprocess.Popen(
                ["dockerd", "--data-root", str(self.root / "data"), "--exec-root", str(self.short / f"exec{self.starts}"),
                 "--host", self["DOCKER_HOST"], "--pidfile", str(self.short / "docker.pid"), "--bridge", self.bridge,
                 "--config-file", str(settings),
                 "--iptables=false", "--ip-masq=false"], stdout=sink, stderr=sink, stdin=subprocess.DEVNULL,
                env={**os.environ, "GOGC": os.environ.get("GOGC", "400")},  # as scripts/ensure-engine.sh starts one
                start_new_session=True)  # its own process group: dockerd and the containerd it starts
        for _ in range(120):
            if subprocess.run(["/usr/bin/docker", "version"], capture_output=True, env={**os.environ, **self}).returncode == 0:
                return
            if self.process.poll() is not None:
                raise RuntimeError("the second engine stopped:\n" + log.read_text()[-3000:])
            time.sleep(0.5)
        raise RuntimeError("the second engine did not answer in 60 s:\n" + log.read_text()[-3000:])

    def kill(self) -> None:
        """SIGKILL to dockerd and the containerd it started: the engine dies at once, as a machine's
        engine does when it crashes or is OOM-killed with its runtime."""
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        pidfile = self.short / f"exec{self.starts}" / "containerd" / "containerd.pid"  # in a group of its own
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
        time.sleep(1)  # the last processes go

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


_SUBNETS = itertools.count()


def _next_subnet() -> int:
    """A /24 for each second engine, apart from the other pytest-xdist workers' (gw0 from
    10.213.16.0, gw1 from 10.213.24.0, …): eight in turn per test process (a process runs at most
    two engines at once)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return 16 + 8 * int(worker or 0) + next(_SUBNETS) % 8


# Where each second engine keeps its short folder (socket, exec root, pidfile: a socket's path is at
# most 107 bytes) and what its bridge is named: a killed run's engines are found by them
# (tests/leftovers.py).
ENGINE_FOLDERS, ENGINE_PREFIX, BRIDGE_PREFIX = Path("/run"), "tb-b-", "tbb"


@contextmanager
def start_second_engine(root: Path):
    """A second, empty Docker engine: its own data root, exec root, socket, pidfile and bridge
    (a `dockerd --bridge none` would delete the first engine's docker0), and no NAT
    (--iptables=false): its RUN steps reach no package mirror. Yields a :class:`SecondEngine`."""
    import tempfile
    import uuid

    root.mkdir(parents=True, exist_ok=True)
    short = Path(tempfile.mkdtemp(prefix=ENGINE_PREFIX, dir=ENGINE_FOLDERS))
    bridge = f"{BRIDGE_PREFIX}{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", f"10.213.{_next_subnet()}.1/24", "dev", bridge], check=True)
    subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
    engine = SecondEngine(root, short, bridge)
    try:
        engine.start()
        yield engine
    finally:
        engine.stop()
        # A killed engine's shims outlive it (their containerd is gone), holding its exec root.
        subprocess.run(["pkill", "-f", f"containerd-shim.* -address {short}/"], check=False)
        subprocess.run(["ip", "link", "del", bridge], check=False)
        for folder in (root / "data", short):  # what a killed engine left mounted (netns, overlays)
            unmount_below(folder)
        subprocess.run(["rm", "-rf", str(root / "data"), str(short)], check=False)


def unmount_below(folder: Path) -> list[str]:
    """Unmount every mount point at or below ``folder``, deepest first (`umount --recursive`
    needs ``folder`` itself to be one); returns them."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    below = sorted((point for point in points if point == str(folder) or point.startswith(f"{folder}/")),
                   key=len, reverse=True)
    for point in below:
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    return below


class RedisStore:
    """A real shared compile-cache store: Debian's redis-server on 127.0.0.1 with a password (a
    secret of the test's own), in ``folder``; ``url`` is ccache's remote storage for it."""

    def __init__(self, folder: Path, password: str):
        self.port = free_port()
        self.folder, self.password, self.process = folder, password, None
        self.url = f"redis://{password}@127.0.0.1:{self.port}"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [shutil.which("redis-server") or "/usr/bin/redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--requirepass", self.password, "--save", "", "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await_listening(self.process, self.port, "redis-server")

    def stop(self) -> None:
        """Down: nothing listens on its port any more."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def stop_once_reached(self) -> threading.Event:
        """Stop the store as soon as another client connects to it (a build's first compile), in a
        thread watching its counters over one connection of its own; the event is set once it
        stopped it. A store that dies in the middle of a build."""
        stopped = threading.Event()
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)

        def ask(command: bytes) -> bytes:
            sock.sendall(command)
            answer = sock.recv(65536)
            if answer.startswith(b"$"):  # a bulk string: $LENGTH\r\nDATA\r\n
                size = int(answer[1:answer.index(b"\r\n")])
                while len(answer) < answer.index(b"\r\n") + 2 + size + 2:
                    answer += sock.recv(65536)
            return answer

        def connections() -> int:
            stats = ask(b"INFO stats\r\n").decode()
            return int(stats.split("total_connections_received:", 1)[1].split()[0])

        assert ask(f"AUTH {self.password}\r\n".encode()).startswith(b"+OK")
        baseline = connections()

        def watch() -> None:
            with sock:
                while connections() == baseline:
                    time.sleep(0.02)
            self.stop()
            stopped.set()

        threading.Thread(target=watch, daemon=True).start()
        return stopped

    def keys(self) -> int:
        """How many entries the store holds (redis-cli DBSIZE)."""
        answer = subprocess.run([shutil.which("redis-cli") or "/usr/bin/redis-cli", "-p", str(self.port),
                                 "--no-auth-warning", "-a", self.password, "dbsize"],
                                capture_output=True, text=True, check=True, timeout=30)
        return int(answer.stdout.strip())


@contextmanager
def redis_store(folder: Path, password: str):
    """A running :class:`RedisStore`, stopped at the end."""
    store = RedisStore(folder, password)
    store.start()
    try:
        yield store
    finally:
        store.stop()


class TlsStore:
    """A real compile-cache store over TLS on 127.0.0.1, its certificate signed by a CA of the test's
    own (``ca``, from :func:`make_test_ca`), run from the package registries' servers: ``s3`` is
    moto's S3-compatible server (a bucket, any key accepted), ``webdav`` is WsgiDAV with a user and
    a password. ``url`` is the [dev] compile_cache value (with ``password``); ``files()`` counts what
    the store holds."""

    def __init__(self, kind: str, folder: Path, password: str):
        import sys

        self.port = free_port()
        self.kind, self.folder, self.password, self.process = kind, folder, password, None
        self.ca, self.certificate, self.key = make_test_ca(folder / "ca")
        self.data = folder / "data"
        self.bin = Path(sys.executable).parent
        self.url = (f"s3://AKIATESTSTORE:{password}@torchbake-cc/nightly?endpoint=https://127.0.0.1:{self.port}"
                    f"&region=us-east-1" if kind == "s3" else f"https://cacheuser:{password}@127.0.0.1:{self.port}/cc")

    def command(self) -> list[str]:
        if self.kind == "s3":
            return [str(self.bin / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port),
                    "-c", str(self.certificate), "-k", str(self.key)]
        self.data.mkdir(parents=True, exist_ok=True)
        config = self.folder / "wsgidav.yaml"
        config.write_text(
            f"host: 127.0.0.1\nport: {self.port}\nssl_certificate: {self.certificate}\nssl_private_key: {self.key}\n"
            f"provider_mapping:\n  '/': {self.data}\nhttp_authenticator:\n  domain_controller: null\n"
            f"  accept_basic: true\n  accept_digest: false\n  default_to_digest: false\n"
            f"simple_dc:\n  user_mapping:\n    '*':\n      cacheuser:\n        password: '{self.password}'\n"
            f"verbose: 0\n")
        return [str(self.bin / "wsgidav"), "--config", str(config)]

    def start(self) -> None:
        import ssl
        import urllib.request

        self.log = self.folder / "server.log"  # each request, one line (werkzeug's access log)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=log, cwd=self.folder)
        context = ssl.create_default_context(cafile=str(self.ca))
        await_listening(self.process, self.port, f"the {self.kind} store", seconds=15)
        if self.kind == "s3":  # the bucket (moto: path style, no signature checked)
            request = urllib.request.Request(f"https://127.0.0.1:{self.port}/torchbake-cc", method="PUT")
            urllib.request.urlopen(request, context=context, timeout=30).close()

    def stop(self) -> None:
        """Down: nothing listens on its port any more."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def files(self) -> int:
        """How many objects the store holds."""
        if self.kind == "webdav":
            return sum(1 for path in self.data.rglob("*") if path.is_file())
        import re
        import ssl
        import urllib.request

        context = ssl.create_default_context(cafile=str(self.ca))
        with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/torchbake-cc?list-type=2&max-keys=1000",
                                    context=context, timeout=30) as answer:
            return len(re.findall(rb"<Key>", answer.read()))

    def requests(self) -> int:
        """How many object requests the store answered (its access log: moto's), sccache's check of
        the store at its start aside."""
        return len(re.findall(rb'"(?:GET|PUT|HEAD) /torchbake-cc/(?![^ ]*\.sccache_check)', self.log.read_bytes()))

    def stop_once_reached(self) -> threading.Event:
        """Stop the store as soon as a build asks it for an object (its first compile), from a
        thread; the event is set once it stopped it. A store that dies in the middle of a build."""
        assert self.kind == "s3", "the access log that says a build reached it is moto's"
        stopped, baseline = threading.Event(), self.requests()

        def watch() -> None:
            while self.process is not None and self.requests() == baseline:
                time.sleep(0.02)
            self.stop()
            stopped.set()

        threading.Thread(target=watch, daemon=True).start()
        return stopped


@contextmanager
def tls_store(kind: str, folder: Path, password: str):
    """A running :class:`TlsStore`, stopped at the end."""
    store = TlsStore(kind, folder, password)
    store.start()
    try:
        yield store
    finally:
        store.stop()


REGISTRY_ACCEPT = ", ".join((  # every manifest kind: an index is what an image with provenance is
    "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json"))


def registry_get(host: str, repository: str, path: str, method: str = "GET"):
    """An answer of the registry on ``host`` (plain HTTP) for ``/v2/REPOSITORY/PATH``; a context manager."""
    import urllib.request

    request = urllib.request.Request(f"http://{host}/v2/{repository}/{path}", method=method,
                                     headers={"Accept": REGISTRY_ACCEPT})
    return urllib.request.urlopen(request, timeout=30)


def registry_digest(host: str, reference: str) -> str:
    """The digest the registry on ``host`` holds under ``reference``'s tag ("" when it has none)."""
    import urllib.error

    repository, tag = reference.split("/", 1)[1].rsplit(":", 1)
    try:
        with registry_get(host, repository, f"manifests/{tag}", method="HEAD") as answer:
            return answer.headers["Docker-Content-Digest"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return ""
        raise


def registry_provenance(host: str, reference: str) -> tuple[dict, str, str, set[str]] | None:
    """The SLSA provenance BuildKit attached to ``reference`` in the registry on ``host``: the
    in-toto statement, its text as stored (to search), the digest of the image manifest beside it
    in the index, and the attestation's own blobs; None when the index holds none."""
    import json

    repository, tag = reference.split("/", 1)[1].rsplit(":", 1)

    def fetch(path: str) -> bytes:
        with registry_get(host, repository, path) as response:
            return response.read()

    index = json.loads(fetch(f"manifests/{tag}"))
    attestations = [m for m in index.get("manifests", [])
                    if (m.get("annotations") or {}).get("vnd.docker.reference.type") == "attestation-manifest"]
    if not attestations:
        return None
    manifest = json.loads(fetch(f"manifests/{attestations[0]['digest']}"))
    layer = next(layer for layer in manifest["layers"] if layer["mediaType"] == "application/vnd.in-toto+json")
    text = fetch(f"blobs/{layer['digest']}").decode()
    image = next(m for m in index["manifests"] if m.get("platform", {}).get("architecture") == "amd64")
    blobs = {manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])}
    return json.loads(text), text, image["digest"], blobs


def registry_manifest(host: str, reference: str) -> dict:
    """The manifest of ``reference`` as the registry on ``host`` (plain HTTP) serves it; of an
    index (an image with attestations beside it), the image's own amd64 manifest."""
    import json

    repository, tag = reference.split("/", 1)[1].rsplit(":", 1)

    def fetch(ref: str) -> dict:
        with registry_get(host, repository, f"manifests/{ref}") as response:
            return json.load(response)

    manifest = fetch(tag)
    if "manifests" in manifest:
        image = next(m for m in manifest["manifests"] if m.get("platform", {}).get("architecture") == "amd64")
        manifest = fetch(image["digest"])
    return manifest


def registry_requests(log: Path, since: int) -> list[tuple[str, str, int]]:
    """(method, path, response bytes) of each request the registry's access log holds after byte ``since``."""
    import re

    with log.open("rb") as handle:
        handle.seek(since)
        text = handle.read().decode(errors="replace")
    return [(method, path, int(size) if size.isdigit() else 0)
            for method, path, size in re.findall(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (/v2/\S*) HTTP/[\d.]+" \d+ (\S+)', text)]


def registry_referrer_blobs(host: str, reference: str) -> set[str]:
    """The blobs of the artifacts that refer to ``reference``'s manifest in the registry on
    ``host`` (its SBOMs and provenance, through the OCI referrers tag schema): their documents and
    their (empty) config."""
    import json
    import urllib.error

    repository = reference.split("/", 1)[1].rsplit(":", 1)[0]
    digest = registry_digest(host, reference)

    def fetch(ref: str) -> dict:
        with registry_get(host, repository, f"manifests/{ref}") as response:
            return json.load(response)

    try:
        index = fetch(digest.replace(":", "-"))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return set()
        raise
    blobs = set()
    for entry in index.get("manifests", []):
        artifact = fetch(entry["digest"])
        blobs |= {artifact["config"]["digest"], *(layer["digest"] for layer in artifact["layers"])}
    return blobs
