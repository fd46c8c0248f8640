"""`invoke` for the suite's commands, each forked from a server that has already imported it.

Each command a test runs (``tests.conftest.run_invoke``) is a process of its own, as a user's is:
its own pid, standard streams, environment, working folder, exit status and exit (atexit, threads
joined, streams flushed). What it does not pay again is Python's start-up and imports: invoke,
torchbake's modules and the libraries a build imports later (the engine's SDK, the SBOM
libraries, SPDX's licence index), 0.35 s of CPU a command and 0.6 s more a build, over 500
commands a run. One server a pytest worker imports them once, runs nothing else, and forks a child
for each command; the child takes the command's streams, environment and folder, then runs
``python -m invoke ARGS`` as the interpreter would.

What a fresh start is the point of runs as a plain subprocess: the installed tool
(test_installed), start-up itself (test_startup), Ctrl-C from a terminal, a copy of the project
(``run_invoke(root=...)``), a command given standard input or PYTHON* variables (what the
interpreter reads as it starts) and a wrapped command line (``wrap``).

Run as a script it is the server: ``python tests/forked_invoke.py SOCKET``; it stops when its
standard input (a pipe from the worker) closes. ``python tests/forked_invoke.py --client SOCKET
ARGS`` is one command forked from it, in the calling process's streams: the benchmarks' smoke runs
(tests/e2e/test_benchmarks.py) run their commands so.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import locale
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

# Libraries torchbake imports when a function first needs them that the server leaves to each
# command: plumbum copies the environment when it is imported (`local.env`, where it looks a
# program up), and torch is the image's, not the host's.
NOT_PRELOADED = ("plumbum", "torch")
# What a module of torchbake's reads from the clock when it is imported (the moment a run began),
# read again in each child for its command (tests/unit/test_forked_invoke.py finds every such read)
SET_AGAIN = (("torchbake.inputs.downloads", "_STARTED"),)
_LENGTH = struct.Struct("!I")


# -- the server ---------------------------------------------------------------------------------

def serve(path: str) -> dict:
    """Fork a child for each request on ``path``; return the request, in the child only."""
    for name in preloaded():
        importlib.import_module(name)
    # SPDX's licence index, which a command builds once in its process when its first SBOM names a
    # licence (license-expression's whole index and its tokenizer: 0.06 to 0.09 s of a build's CPU)
    from torchbake.supply_chain.licences import spdx_licensing

    spdx_licensing()
    gc.freeze()  # what is imported stays out of each child's collections (they would touch every page of it)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}  # child pid: the connection its exit status goes to
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(wake_r, selectors.EVENT_READ, "exited")
    selector.register(sys.stdin, selectors.EVENT_READ, "worker")
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "worker":  # the worker's end closed: it is gone
                sys.exit(0)
            if key.data == "exited":
                os.read(wake_r, 4096)
                _report_exits(waiting)
                continue
            connection, _ = listener.accept()
            request, fds = _receive(connection)
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                selector.close()
                for sock in (listener, *waiting.values()):
                    sock.close()
                os.close(wake_r)
                os.close(wake_w)
                _take_streams(fds)
                request["report"] = connection.detach()
                return request
            for fd in fds:
                os.close(fd)
            waiting[pid] = connection
            connection.sendall(f"{pid}\n".encode())
            _report_exits(waiting)  # one that exited before it was waited for


def preloaded() -> list[str]:
    """What a command imports: invoke, every module of torchbake, and the libraries torchbake's
    functions import when they run (the engine's SDK, the SBOM and signing libraries: 0.5 s of a
    build's CPU), but those of NOT_PRELOADED."""
    import ast
    import pkgutil

    import torchbake

    names = ["invoke.main", *(info.name for info in pkgutil.walk_packages(torchbake.__path__, "torchbake."))]
    for path in sorted(Path(torchbake.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if id(node) in top:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                # the package, and each name taken from it that is a module of its own (`from
                # spdx_python_model.bindings import v3_0_1`: 0.2 s of CPU a build where each child imported it)
                names.append(node.module)
                names.extend(f"{node.module}.{alias.name}" for alias in node.names
                             if _is_module(f"{node.module}.{alias.name}"))
            elif isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
    return [name for name in dict.fromkeys(names) if name.split(".")[0] not in NOT_PRELOADED]


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module that can be imported (not an attribute of its package)."""
    if name.split(".")[0] in NOT_PRELOADED:  # (finding it would import its package)
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _report_exits(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = waiting.pop(pid, None)
        if connection is None:
            continue
        answer = {"returncode": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime}
        with contextlib.suppress(OSError):  # the client gave up on it (a timeout)
            connection.sendall(json.dumps(answer).encode() + b"\n")
        connection.close()


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while len(data) < _LENGTH.size or len(data) < _LENGTH.size + _LENGTH.unpack_from(data)[0]:
        data += connection.recv(1 << 16)
    return json.loads(data[_LENGTH.size:]), list(fds)


def _take_streams(fds: list[int]) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)


def become(request: dict) -> None:
    """Make this child the process ``python -m invoke ARGS`` would have started."""
    os.close(request.pop("report"))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    encoding = sys.stdout.encoding
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", 1 if os.isatty(1) else -1, encoding=encoding,  # noqa: SIM115
                                       closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", 1, encoding=encoding, errors="backslashreplace",  # noqa: SIM115
                                       closefd=False)
    sys.path[0] = request["cwd"]
    sys.argv = ["invoke", *request["args"]]  # runpy sets argv[0] to invoke/__main__.py, as -m does
    for module, name in SET_AGAIN:
        setattr(sys.modules[module], name, time.time())


# -- the client ---------------------------------------------------------------------------------

class ForkedInvoke:
    """A worker's server, started on first use and stopped with the worker."""

    def __init__(self, folder: Path, root: Path) -> None:
        self.path = str(folder / f"invoke-{os.getpid()}.sock")
        self.root = root
        self.server: subprocess.Popen | None = None
        self._starting = threading.Lock()  # threads of one worker (the benchmarks' lanes) start one server

    def start(self) -> None:
        with self._starting:
            self._start()

    def _start(self) -> None:
        if self.server is not None and self.server.poll() is None:
            return
        if os.path.exists(self.path):
            os.unlink(self.path)
        # (the worker's environment: each child gets its command's, and no module reads it at import)
        self.server = subprocess.Popen([sys.executable, __file__, self.path], cwd=self.root,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if self.server.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the forked-invoke server did not start (exit {self.server.wait()})")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stdin.close()
            self.server.wait(timeout=30)
            self.server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def run(self, argv: list[str], args: list[str], *, env: dict[str, str], cwd: Path,
            timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
        """``python -m invoke ARGS`` (``argv`` as the record names it) with no standard input, as
        subprocess.run with capture_output and text would, and the CPU seconds it used."""
        self.start()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r = os.open(os.devnull, os.O_RDONLY)
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
            _send(connection, args, env, cwd, [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        reader = connection.makefile("rb")
        pid = int(reader.readline())
        output = {out_r: bytearray(), err_r: bytearray()}
        selector = selectors.DefaultSelector()
        for fd in output:
            selector.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout

        def timed_out() -> subprocess.TimeoutExpired:
            _kill(pid)
            return subprocess.TimeoutExpired(argv, timeout, _text(output[out_r]), _text(output[err_r]))

        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise timed_out()
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        output[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
            connection.settimeout(max(deadline - time.monotonic(), 0.1))
            try:
                answer = json.loads(reader.readline())
            except (TimeoutError, ValueError):
                raise timed_out() from None
        finally:
            selector.close()
            os.close(out_r)
            os.close(err_r)
            reader.close()
            connection.close()
        done = subprocess.CompletedProcess(argv, answer["returncode"], _text(output[out_r]), _text(output[err_r]))
        return done, answer["cpu"]


def _send(connection: socket.socket, args: list[str], env: dict[str, str], cwd: str | Path, fds: list[int]) -> None:
    """A command's request (what :func:`_receive` reads) and its standard streams."""
    request = json.dumps({"args": args, "env": env, "cwd": str(cwd)}).encode()
    socket.send_fds(connection, [_LENGTH.pack(len(request)) + request], fds)


def _kill(pid: int, number: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def _text(data: bytes) -> str:
    """As subprocess's text mode reads a stream: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


# Where a process's commands are to be forked from a server: the variable that names its socket (the
# benchmarks' smoke runs: benchmarks/_steps.py INVOKE; tests/e2e/test_benchmarks.py sets it).
SERVER_VARIABLE = "TB_FORKED_INVOKE"


def client_command(path: str) -> list[str]:
    """The command line that runs ``python -m invoke`` forked from the server on ``path``: ARGS follow."""
    return [sys.executable, __file__, "--client", path]


def client(path: str, args: list[str]) -> int:
    """``python -m invoke ARGS`` forked from the server listening on ``path``, with this process's
    standard streams, environment and folder: what a benchmark's smoke run starts for each of its
    commands (benchmarks/_steps.py INVOKE). Its exit status, or its signal; SIGINT, SIGTERM and SIGHUP
    this process gets go to it. (Killed with SIGKILL, this process leaves its command running.)"""
    forwarded = [number for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                 if signal.getsignal(number) is not signal.SIG_IGN]  # one ignored here stays ignored
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)  # held until the command's pid is known
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    _send(connection, args, dict(os.environ), os.getcwd(), [0, 1, 2])
    reader = connection.makefile("rb")
    pid = int(reader.readline())
    for number in forwarded:
        signal.signal(number, lambda received, _: _kill(pid, received))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    returncode = json.loads(reader.readline())["returncode"]
    if returncode < 0:  # ended by a signal: this process ends by it too (SIGKILL's disposition is fixed)
        with contextlib.suppress(OSError):
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    return returncode


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        sys.exit(client(sys.argv[2], sys.argv[3:]))
    command = serve(sys.argv[1])
    become(command)
    import runpy

    runpy.run_module("invoke", run_name="__main__", alter_sys=True)
