"""Trust under faults with the real engine and real signals: SIGINT / SIGTERM during a download,
during context preparation and during `docker build`; two builds at once sharing one cache."""

from __future__ import annotations

import http.server
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import ROOT
from tests.support import start_second_engine

from .helpers import STAND_IN_PYTHON, as_in_a_terminal, copy_image, docker, listing, make_wheel

KIT_PADDING = os.urandom(8 << 20)  # incompressible: the download takes a while on a slow server


def toolkit_tarball(install_script: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("kit/install.sh", install_script.encode()), ("kit/padding.bin", KIT_PADDING)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@contextmanager
def slow_server(files: dict[str, bytes], rate: int = 4 << 20):
    """Serves ``files`` at ``rate`` bytes/s; counts the requests for each."""
    requests: dict[str, int] = {}
    asked = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            name = self.path.lstrip("/")
            requests[name] = requests.get(name, 0) + 1
            asked.set()
            body = files[name]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            step = rate // 8
            try:
                for start in range(0, len(body), step):
                    self.wfile.write(body[start:start + step])
                    time.sleep(0.125)
            except OSError:
                pass  # the client went away

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests, asked
    finally:
        httpd.shutdown()
        httpd.server_close()


class Run:
    """`invoke ARGS` started in the background, its output collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str]):
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")}
        full_env.update(env, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen([sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args], cwd=ROOT,
                                        env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        stdin=subprocess.DEVNULL,
                                        preexec_fn=as_in_a_terminal)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert self.process.poll() is None, f"ended before {text!r} appeared:\n{self.output[-3000:]}"
            assert time.monotonic() < deadline, f"{text!r} did not appear:\n{self.output[-3000:]}"
            time.sleep(0.05)

    def interrupt(self, signum: int) -> tuple[int, float]:
        """Send the signal; return the exit status and the seconds it took to end."""
        sent = time.monotonic()
        self.process.send_signal(signum)
        code = self.process.wait(timeout=60)
        seconds = time.monotonic() - sent
        self.close()
        return code, seconds

    def finish(self, timeout: float = 900) -> int:
        code = self.process.wait(timeout=timeout)
        self.close()
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.reader.join(timeout=10)
        self.process.stdout.close()


def downloads_are_complete_and_verified(cache: Path) -> None:
    """The download cache holds no partial file, and every file has a record matching its bytes."""
    import hashlib

    folder = cache / "downloads"
    for path in folder.rglob("*") if folder.exists() else []:
        assert not path.name.endswith(".part"), f"partial download left: {path}"
        if path.is_file() and path.suffix not in (".sha256", ".lock", ".validators"):  # records beside each file
            record = path.with_name(path.name + ".sha256").read_text().split()[0]
            assert record == hashlib.sha256(path.read_bytes()).hexdigest(), path


def leftovers(cache: Path, repository: str) -> dict[str, list[str]]:
    contexts = cache / "contexts"
    return {
        "contexts": sorted(p.name for p in contexts.iterdir()) if contexts.exists() else [],
        "candidates": [t for t in listing("images", "--format", "{{.Tag}}", repository).split()
                       if t.startswith("torchbake-candidate")],
        # verification containers of this repository's images (other tests may verify meanwhile)
        "probes": [line.split()[0] for line in listing("ps", "-a", "--filter", "label=torchbake.probe=true", "--format",
                                                       "{{.ID}} {{.Image}}").splitlines()
                   if line.split()[1].startswith(repository + ":")],
    }


def test_signals_during_download_context_and_build_leave_nothing_behind(base_image, tmp_path, run_id, tiny_profile):
    cache = tmp_path / "cache"
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(cache)}
    repository = f"torchbake-test/interrupted-{run_id}"
    image = f"{repository}:1"
    docker("tag", base_image, image)  # "the image that existed before"
    before = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    # unique to this run, so no earlier run's layer cache can serve the installer's step
    kit = toolkit_tarball(f"#!/bin/bash\necho 'kit: installing'\nsleep 15\necho 'kit: done'\n# {run_id}\n")
    with slow_server({"kit.tar.gz": kit}) as (url, requests, asked):
        args = ["build", "--config", str(tiny_profile), "--name", repository, "--tag", "1", "--base-img", base_image,
                "--musa-toolkits-url", f"{url}/kit.tar.gz"]
        def interrupted(run: Run, signum: int, within: float, what: str) -> None:
            """Interrupt, then check it ended in time, with the right status, leaving nothing."""
            code, seconds = run.interrupt(signum)
            print(f"{signal.Signals(signum).name} during {what}: ended in {seconds:.2f} s")
            assert code == 128 + signum, run.output
            assert seconds < within
            assert f"torchbake: interrupted ({signal.Signals(signum).name})" in run.output
            downloads_are_complete_and_verified(cache)
            assert leftovers(cache, repository) == {"contexts": [], "candidates": [], "probes": []}
            assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() == before

        try:
            # 1. SIGINT while the toolkit is being downloaded.
            run = Run(args, env)
            assert asked.wait(300), run.output
            interrupted(run, signal.SIGINT, 5, "the download")
            assert not list((cache / "downloads").rglob("kit.tar.gz"))
            # 2. SIGTERM while the context is being prepared.
            run = Run(args, env)
            run.wait_for("Preparing the build context")
            interrupted(run, signal.SIGTERM, 5, "context preparation")
            # 3. SIGTERM while `docker build` runs the toolkit's installer.
            run = Run(args, env)
            run.wait_for("kit: installing")
            interrupted(run, signal.SIGTERM, 15, "docker build")

            # 4. The next run succeeds, from what the interrupted runs left (complete files only).
            run = Run(args, env)
            assert run.finish() == 0, run.output[-3000:]
            assert "kit: done" in run.output
            downloads_are_complete_and_verified(cache)
            assert leftovers(cache, repository) == {"contexts": [], "candidates": [], "probes": []}
            assert docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip() != before
        finally:
            docker("image", "rm", "--force", image, check=False)


def test_two_builds_at_once_share_the_cache(base_image, tmp_path, run_id, tiny_profile):
    cache = tmp_path / "cache"
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(cache)}
    kit = toolkit_tarball("#!/bin/bash\necho 'kit: installed'\n")
    images = [f"torchbake-test/concurrent-{name}-{run_id}:1" for name in ("a", "b")]
    with slow_server({"kit.tar.gz": kit}) as (url, requests, _):
        runs = [Run(["build", "--config", str(tiny_profile), "--name", image.split(":")[0], "--tag", "1",
                     "--base-img", base_image, "--musa-toolkits-url", f"{url}/kit.tar.gz"], env) for image in images]
        try:
            codes = [run.finish() for run in runs]
            assert codes == [0, 0], "\n\n".join(run.output[-2000:] for run in runs)
            assert requests == {"kit.tar.gz": 1}  # one download; the other run waited for it and used it
            downloads_are_complete_and_verified(cache)
            for image in images:
                assert docker("image", "inspect", image, check=False).returncode == 0
            assert sorted(p.name for p in (cache / "contexts").iterdir()) == []
        finally:
            for image in images:
                docker("image", "rm", "--force", image, check=False)


def test_build_all_interrupted_stops_its_builds_and_cleans_up(base_image, tmp_path, run_id, tiny_torch):
    """build-all runs cells in worker threads; SIGTERM still ends it within seconds."""
    cache = tmp_path / "cache"
    kit = toolkit_tarball("#!/bin/bash\necho 'kit: installing'\nsleep 120\n")
    repository = f"torchbake-test/matrix-interrupted-{run_id}"
    with slow_server({"kit.tar.gz": kit}) as (url, _, _):
        profile = tmp_path / "sleepy.toml"
        profile.write_text(f'[image]\nname = "x"\n[wheels]\ntorch = "{tiny_torch}"\nextra = []\n'
                           f'[toolkits]\nmusa_toolkits_url = "{url}/kit.tar.gz"\n[build]\nvariant = "release"\n')
        matrix = tmp_path / "matrix.toml"
        matrix.write_text(f'[matrix]\nprofiles = ["{profile}"]\npythons = ["3.11"]\nvariants = ["release"]\n'
                          f'name = "{repository}"\ntag = "{{variant}}"\n'
                          f'[matrix.options.release]\n"image.base" = "{base_image}"\n')
        report = tmp_path / "report.json"
        run = Run(["build-all", "--config", str(matrix), "--report", str(report)], {"TORCHBAKE_PATHS_CACHE_DIR": str(cache)})
        run.wait_for("kit: installing")
        code, seconds = run.interrupt(signal.SIGTERM)
    print(f"SIGTERM during build-all: ended in {seconds:.2f} s")
    assert code == 143, run.output[-3000:]
    assert seconds < 20
    # the night's report is written, the cell marked interrupted (not "failed … exit status")
    assert [(c["id"], c["status"]) for c in json.loads(report.read_text())["cells"]] == [("sleepy-release-py311", "interrupted")]
    # buildx's own last word as its build is stopped is the only "failed" there
    said = [line for line in run.output.splitlines() if "failed " in line]
    assert all(line.endswith("ERROR: failed to solve: Canceled: context canceled") for line in said), said
    assert leftovers(cache, repository) == {"contexts": [], "candidates": [], "probes": []}
    assert listing("images", "-q", repository).strip() == ""
    downloads_are_complete_and_verified(cache)


def test_an_engine_that_dies_during_a_build_is_named_and_the_next_run_succeeds(packaged_base, tmp_path, run_id, tb_env,
                                                                               tmp_path_factory, tiny_torch):
    """dockerd killed (SIGKILL) in the middle of a build-all cell, while its candidate image is being
    verified: the run ends within the engine timeout saying the engine stopped answering (exit 4),
    the report is written; with the engine back, the same run succeeds and leaves no candidate tag
    of its own, and `invoke gc` removes the one the killed run could not."""
    slow = make_wheel(tmp_path, "torchbake-slow-ext", "1.0", [],  # verify imports it: a window of 20 s
                      {"slow_ext/__init__.py": "import time\ntime.sleep(20)\n"})
    with start_second_engine(tmp_path_factory.mktemp("engine-dies")) as engine:
        copy_image(packaged_base, engine)
        profile = tmp_path / "lean.toml"
        profile.write_text(f'{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\nextra = []\n'
                           f'extension = "{slow}"\nextension_module = "slow_ext"\n'
                           '[build]\nvariant = "release"\nnetwork = "host"\nengine_timeout = 15\n')
        matrix = tmp_path / "nightly.toml"
        matrix.write_text(f'[matrix]\nprofiles = ["{profile}"]\npythons = ["3.11"]\nvariants = ["release"]\n'
                          f'name = "torchbake-test/dies"\ntag = "{{variant}}-{run_id}"\n'
                          f'[matrix.options.release]\n"image.base" = "{packaged_base}"\n')
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")}, **tb_env, **engine}
        on_b = dict(engine)

        def candidates() -> list[str]:
            return [t for t in docker("images", "--format", "{{.Tag}}", "torchbake-test/dies", env=on_b).stdout.split()
                    if t.startswith("torchbake-candidate-")]

        run = subprocess.Popen([sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build-all", "--config",
                                str(matrix), "--report", str(tmp_path / "r1.json")], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not candidates():  # built; now the 20-second verification runs
            assert run.poll() is None, "build-all ended before its candidate image existed:\n" + run.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no candidate image within 300 s"
            time.sleep(0.5)
        while not docker("ps", "-q", "--filter", "label=torchbake.probe=true", env=on_b).stdout.strip():
            assert run.poll() is None and time.monotonic() < deadline, "no verify container came up"
            time.sleep(0.2)  # until the verify container runs (it imports the extension for 20 s)
        engine.kill()
        killed = time.monotonic()
        out, err = run.communicate(timeout=120)
        assert run.returncode == 4 and time.monotonic() - killed < 60, (run.returncode, out[-3000:] + err[-3000:])
        assert f"No Docker engine answers at {engine['DOCKER_HOST']}" in out + err, out[-3000:] + err[-3000:]
        assert json.loads((tmp_path / "r1.json").read_text())["cells"][0]["status"] == "failed"

        engine.start()
        left = candidates()
        assert len(left) == 1, left  # the killed run's: nobody could remove it
        again = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build-all", "--config",
                                str(matrix), "--report", str(tmp_path / "r2.json")], cwd=ROOT, env=env,
                               capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        tags = docker("images", "--format", "{{.Repository}}:{{.Tag}}", env=on_b).stdout
        assert f"torchbake-test/dies:release-{run_id}" in tags
        assert candidates() == left  # the new run's own candidate is gone
        swept = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(ROOT), "gc"], cwd=ROOT, env=env,
                               capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
        assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
        assert candidates() == [] and f"torchbake-test/dies:release-{run_id}" in docker(
            "images", "--format", "{{.Repository}}:{{.Tag}}", env=on_b).stdout
