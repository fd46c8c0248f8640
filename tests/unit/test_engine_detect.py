"""Finding a docker client that can build with BuildKit, using fake clients on PATH."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from tests.support import ENGINE_SETTINGS
from torchbake.adapters.docker_cli import find_client, keep_answers
from torchbake.core import data
from torchbake.core.errors import EngineError


def fake_client(folder, body: str) -> str:
    """An executable ``docker`` in ``folder``: a shell script of ``body`` that exits 0 otherwise."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "docker"
    script.write_text(f"#!/bin/sh\n{body}exit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def fake_docker(folder, version: str, buildx: bool):
    return fake_client(folder,
        f'if [ "$1" = "--version" ]; then echo "Docker version {version}, build abc"; exit 0; fi\n'
        f'if [ "$1" = "buildx" ]; then {"echo buildx v0.12; exit 0" if buildx else "echo unknown command >&2; exit 1"}; fi\n')


def test_skips_a_client_without_buildx_and_takes_one_with_it(tmp_path, monkeypatch):
    monkeypatch.setattr("torchbake.adapters.docker_cli.FALLBACK_CLIENTS", ())
    plain = fake_docker(tmp_path / "plain", "28.2.2", buildx=False)
    capable = fake_docker(tmp_path / "capable", "26.1.5+dfsg1", buildx=True)
    path = os.pathsep.join([str(tmp_path / "plain"), str(tmp_path / "capable")])
    client = find_client("auto", {"PATH": path})
    assert client.binary == capable != plain
    assert client.build_mode == "buildx"
    assert client.version == "26.1.5"


def test_the_legacy_client_of_docker_20_10_cannot_build_and_is_told_what_to_install(tmp_path, monkeypatch):
    """Docker 20.10's `docker build` with DOCKER_BUILDKIT=1 has no registry cache of every stage, no
    direct push, no attestations: refused before any work, naming what to install."""
    monkeypatch.setattr("torchbake.adapters.docker_cli.FALLBACK_CLIENTS", ())
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    with pytest.raises(EngineError) as info:
        find_client("auto", {"PATH": str(tmp_path / "old")})
    text = str(info.value)
    assert f"{old}: client 20.10.24 has no buildx plugin (`{old} buildx version` failed), so it cannot build" in text
    assert "Docker >= 26 and its buildx plugin" in text and f"bash {data.ENGINE_SCRIPT}" in text
    assert find_client("auto", {"PATH": str(tmp_path / "old")}, for_build=False).build_mode == "none"  # runs containers


def test_prefers_buildx_when_present(tmp_path, monkeypatch):
    monkeypatch.setattr("torchbake.adapters.docker_cli.FALLBACK_CLIENTS", ())
    fake_docker(tmp_path / "a", "28.2.2", buildx=True)
    client = find_client("auto", {"PATH": str(tmp_path / "a")})
    assert client.build_mode == "buildx"


def test_no_capable_client_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr("torchbake.adapters.docker_cli.FALLBACK_CLIENTS", ())
    new = fake_docker(tmp_path / "new", "28.2.2", buildx=False)
    with pytest.raises(EngineError) as info:
        find_client("auto", {"PATH": str(tmp_path / "new")})
    text = str(info.value)
    assert f"{new}: client 28.2.2 has no buildx plugin (`{new} buildx version` failed), so it cannot build" in text
    assert "apt-get install docker-buildx" in text
    assert "--docker" in text


def test_explicit_client_is_checked(tmp_path):
    new = fake_docker(tmp_path / "new", "28.2.2", buildx=False)
    with pytest.raises(EngineError, match="has no buildx plugin"):
        find_client(new, {})
    with pytest.raises(EngineError, match="'/no/such/docker' .* was not found or is not executable"):
        find_client("/no/such/docker", {})


def test_no_client_at_all(tmp_path, monkeypatch):
    monkeypatch.setattr("torchbake.adapters.docker_cli.FALLBACK_CLIENTS", ())
    with pytest.raises(EngineError, match="No docker client was found on PATH"):
        find_client("auto", {"PATH": str(tmp_path)})


def test_proxy_variables_reach_the_build_by_name_only():
    from pathlib import Path

    from torchbake.adapters.engine import DockerClient

    client = DockerClient(binary="/usr/bin/docker", version="26.1.5", build_mode="buildx",
                          environ={"HTTPS_PROXY": "http://user:secret@proxy:3128", "no_proxy": "localhost",
                                   "PIP_INDEX_URL": "https://mirror.invalid/simple", "HTTP_PROXY": ""})
    argv, env = client.build_command(context=Path("/ctx"), dockerfile=Path("/ctx/Dockerfile"), tag="t:1")
    assert argv == ["/usr/bin/docker", "buildx", "build", "--output=type=docker,compression=zstd,oci-mediatypes=true,force-compression=true", "--provenance=false", "--progress=plain", "--file",
                    "/ctx/Dockerfile", "--tag", "t:1",
                    "--build-arg", "HTTPS_PROXY", "--build-arg", "no_proxy", "/ctx"]
    assert "secret" not in " ".join(argv)


def test_an_engine_on_a_unix_socket_here_is_local_one_elsewhere_is_not(monkeypatch, tmp_path):
    """Its /dev and data root are this machine's: a rootless engine's or a second engine's socket
    counts as much as /var/run/docker.sock; ssh:// and tcp:// engines, and a socket not here, do not."""
    import socket

    from torchbake.adapters.engine import engine_is_local

    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        for host, local in ((f"unix://{path}", True), (f"unix://{tmp_path}/gone.sock", False),
                            ("tcp://10.0.0.5:2376", False), ("ssh://builder@big-box", False)):
            monkeypatch.setenv("DOCKER_HOST", host)
            assert engine_is_local() is local, host


def fake_builders(folder, builders: dict[str, str], current: str) -> str:
    """A client whose `buildx inspect NAME` knows ``builders`` (name → driver) and whose current
    docker context is ``current``."""
    inspect = "".join(f'  {name}) printf "Name: {name}\\nDriver: {driver}\\nNodes:\\nName: {name}0\\n"; exit 0;;\n'
                      for name, driver in builders.items())
    return fake_client(folder,
        'if [ "$1" = buildx ] && [ "$2" = inspect ]; then case "$3" in\n'
        f'{inspect}  *) echo "ERROR: no builder \\"$3\\" found" >&2; exit 1;; esac; fi\n'
        f'if [ "$1" = context ] && [ "$2" = show ]; then echo {current}; exit 0; fi\n')


def test_a_builder_is_checked_before_any_work(tmp_path):
    """Missing: named, with the command that lists builders. A docker-driver builder (a context's
    engine) that is not the current context, which buildx would refuse: refused, naming the
    DOCKER_CONTEXT that makes it the run's engine; the current one, or another driver: taken."""
    from torchbake.adapters.docker_cli import DockerCLI, check_builder

    binary = fake_builders(tmp_path, {"fleet": "remote", "here": "docker", "there": "docker"}, current="here")

    def client(builder: str) -> DockerCLI:
        return DockerCLI(binary, "26.1.5", "buildx", builder=builder)

    with pytest.raises(EngineError) as missing:
        check_builder(client("nosuch"))
    assert str(missing.value).startswith("No buildx builder 'nosuch' ([build] builder / --builder): ERROR: no builder")
    assert f"`{binary} buildx ls` lists the builders" in str(missing.value)
    with pytest.raises(EngineError) as elsewhere:
        check_builder(client("there"))
    assert ("Builder 'there' is the docker driver of context 'there', and buildx builds with it only where that"
            " context is the current one (here it is 'here')") in str(elsewhere.value)
    assert "(DOCKER_CONTEXT=there, DOCKER_HOST unset)" in str(elsewhere.value)
    check_builder(client("here"))
    check_builder(client("fleet"))


def test_the_builder_is_passed_to_buildx():
    from pathlib import Path

    from torchbake.adapters.docker_cli import DockerCLI

    argv, _ = DockerCLI("/usr/bin/docker", "26.1.5", "buildx", builder="fleet").build_command(
        context=Path("/ctx"), dockerfile=Path("/ctx/Dockerfile"), tag="a/b:c")
    assert argv[:7] == ["/usr/bin/docker", "buildx", "build", "--output=type=docker,compression=zstd,oci-mediatypes=true,force-compression=true", "--provenance=false", "--builder", "fleet"]


@pytest.mark.parametrize(("compression", "flag"), [
    ("zstd", "--output=type=docker,compression=zstd,oci-mediatypes=true,force-compression=true"),
    ("gzip", "--output=type=docker,compression=gzip,oci-mediatypes=true,force-compression=true"),
    ("uncompressed", "--output=type=docker,compression=uncompressed,oci-mediatypes=true,force-compression=true"),
])
def test_layers_get_the_compression_asked_for_with_oci_media_types(compression, flag):
    from torchbake.adapters.engine import DockerClient

    client = DockerClient(binary="/usr/bin/docker", version="26.1.5", build_mode="buildx", compression=compression)
    argv, _ = client.build_command(context=Path("/ctx"), dockerfile=Path("/ctx/Dockerfile"), tag="t:1")
    assert argv[3] == flag


@pytest.fixture(autouse=True)
def nothing_learnt_before():
    """Each test starts with no answer learnt by another (the process-wide record of this run's)."""
    import torchbake.adapters.docker_cli as clients

    clients._TO_KEEP.clear()
    yield
    clients._TO_KEEP.clear()


def counting_docker(folder, buildx: bool = True) -> tuple[str, Path]:
    """fake_docker that also writes a line into ``folder``/asked for each time it is started."""
    asked = folder / "asked"
    binary = fake_client(folder, f'echo "$@" >> {asked}\n'
                         'if [ "$1" = "--version" ]; then echo "Docker version 26.1.5, build abc"; exit 0; fi\n'
                         f'if [ "$1" = "buildx" ]; then {"exit 0" if buildx else "exit 1"}; fi\n')
    return binary, asked


def test_a_clients_answer_is_kept_until_the_binary_its_plugin_or_its_settings_change(tmp_path):
    """Every command used to start the client twice (`--version`, `buildx version`) before any work;
    an answer is kept in the cache folder and asked again only when what it depends on changed."""
    kept = tmp_path / "cache"
    kept.mkdir()
    binary, asked = counting_docker(tmp_path / "bin")
    environ = {"DOCKER_CONFIG": str(tmp_path / "config")}

    def find(env=environ):
        """A command that succeeded: what it learnt of the client is written (reports_errors)."""
        found = find_client(binary, env, kept=kept)
        keep_answers()
        return found

    assert (find().version, find().build_mode) == ("26.1.5", "buildx")
    assert len(asked.read_text().splitlines()) == 2  # asked once: `--version` and `buildx version`
    plugin = tmp_path / "config" / "cli-plugins" / "docker-buildx"  # a buildx plugin of the user's appears
    plugin.parent.mkdir(parents=True)
    plugin.write_text("#!/bin/sh\n")
    find()
    find()
    assert len(asked.read_text().splitlines()) == 4
    Path(binary).write_text(Path(binary).read_text().replace("26.1.5", "27.0.3"))  # the client is upgraded
    assert find().version == "27.0.3" and len(asked.read_text().splitlines()) == 6
    assert find({**environ, "DOCKER_CLI_EXPERIMENTAL": "enabled"}).version == "27.0.3"
    assert len(asked.read_text().splitlines()) == 8  # a setting the client reads: asked again
    secret = "dckr_pat_" + "7" * 24
    find({**environ, "DOCKER_PASSWORD": secret, "DOCKER_METADATA_OUTPUT_TAGS": "x:1"})
    assert len(asked.read_text().splitlines()) == 8  # others (a CI's per-run ones): not asked again ...
    record = (kept / "docker-clients.json").read_text()
    assert secret not in record and str(tmp_path) not in record  # ... and the record holds no value of the caller's
    (kept / "docker-clients.json").write_text("{not json")  # damaged: asked again, written anew
    assert find().version == "27.0.3" and len(asked.read_text().splitlines()) == 10
    find()
    assert len(asked.read_text().splitlines()) == 10


def test_a_dry_run_reads_a_kept_answer_and_writes_none(tmp_path):
    kept = tmp_path / "cache"
    kept.mkdir()
    binary, asked = counting_docker(tmp_path / "bin")
    find_client(binary, {}, kept=kept, writes=False)
    keep_answers()
    assert list(kept.iterdir()) == [] and len(asked.read_text().splitlines()) == 2
    find_client(binary, {}, kept=kept)
    keep_answers()
    find_client(binary, {}, kept=kept, writes=False)
    assert len(asked.read_text().splitlines()) == 4  # the kept answer serves the dry run


def test_only_a_command_that_succeeds_keeps_what_it_learnt_of_its_client(tmp_path):
    """Bad input leaves the cache folder as it was (test_bad_inputs: `verify` of a missing image
    had written the client's answer before the engine said there is no such image)."""
    from torchbake.core.errors import ConfigurationError
    from torchbake.tasks.cli import reports_errors

    kept = tmp_path / "cache"
    kept.mkdir()
    binary, asked = counting_docker(tmp_path / "bin")

    @reports_errors
    def task(fail: bool):
        find_client(binary, {}, kept=kept)
        if fail:
            raise ConfigurationError("no such image")

    with pytest.raises(Exit):
        task(True)
    assert list(kept.iterdir()) == []
    task(False)
    assert [p.name for p in kept.iterdir()] == ["docker-clients.json"]
    task(False)
    assert len(asked.read_text().splitlines()) == 4  # the failed command's probe, the first good one's


def test_a_client_that_cannot_build_is_asked_again_every_time(tmp_path):
    kept = tmp_path / "cache"
    kept.mkdir()
    binary, asked = counting_docker(tmp_path / "bin", buildx=False)
    for _ in range(2):
        with pytest.raises(EngineError, match="has no buildx plugin"):
            find_client(binary, {}, kept=kept)
    assert len(asked.read_text().splitlines()) == 4
    assert not (kept / "docker-clients.json").exists()


@pytest.mark.parametrize("second", ["ok", "race", "other"])
def test_a_build_that_lost_a_layer_to_the_image_stores_race_runs_once_more(second, tmp_path, monkeypatch, capsys):
    """moby/buildkit#6521: an image removed beside a build's unpacking takes a shared layer's
    snapshot from under it. That failure (only that one) is built once more; once, not again."""
    from torchbake.adapters.engine import DockerClient
    from torchbake.core.errors import BuildError

    race = ('#16 ERROR: failed to prepare extraction snapshot "extract-1-RJVM sha256:9483": parent snapshot'
            ' sha256:1668 does not exist: not found')
    later = {"ok": "#16 DONE 0.2s", "race": race, "other": "#9 ERROR: process did not complete successfully"}[second]
    calls = tmp_path / "calls"
    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/bash\necho x >> {calls}\nif [ $(wc -l < {calls}) = 1 ]; then echo '{race}'; exit 1; fi\n"
                    f"echo '{later}'\n[ '{second}' = ok ]\n")
    fake.chmod(0o755)
    monkeypatch.setattr(DockerClient, "check_engine", lambda self: "26.1.5")
    client = DockerClient(binary=str(fake), version="26.1.5", build_mode="buildx")
    log = tmp_path / "build.log"
    if second == "ok":
        client.build([str(fake), "buildx", "build", "."], {}, log)
    else:
        with pytest.raises(BuildError):
            client.build([str(fake), "buildx", "build", "."], {}, log)
    assert len(calls.read_text().split()) == 2
    assert "building once more" in capsys.readouterr().out


def test_a_build_that_failed_otherwise_is_not_built_again(tmp_path, monkeypatch):
    from torchbake.adapters.engine import DockerClient
    from torchbake.core.errors import BuildError

    calls = tmp_path / "calls"
    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/bash\necho x >> {calls}\necho 'ERROR: failed to solve: process did not complete'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(DockerClient, "check_engine", lambda self: "26.1.5")
    with pytest.raises(BuildError):
        DockerClient(binary=str(fake), version="26.1.5", build_mode="buildx").build([str(fake)], {}, tmp_path / "log")
    assert len(calls.read_text().split()) == 1


def engine_settings(tmp_path, text: str | None) -> tuple[int, str, object]:
    """scripts/engine_settings.py run on a daemon.json holding ``text`` (None: no file); its exit
    status, its error output and the file after it (read as JSON where it is JSON)."""
    import json
    import subprocess
    import sys

    settings = tmp_path / "etc" / "docker" / "daemon.json"
    if text is not None:
        settings.parent.mkdir(parents=True)
        settings.write_text(text)
    script = ENGINE_SETTINGS.with_name("engine_settings.py")
    done = subprocess.run([sys.executable, str(script), str(settings)], capture_output=True, text=True)
    after = settings.read_text() if settings.exists() else None
    try:
        return done.returncode, done.stderr, json.loads(after) if after is not None else None
    except json.JSONDecodeError:
        return done.returncode, done.stderr, after


def test_the_engine_settings_are_added_and_the_users_own_kept(tmp_path):
    """ensure-engine's settings: the containerd image store and a bound on BuildKit's build
    history, added where daemon.json lacks them; a value the user set stays theirs."""
    code, _, written = engine_settings(tmp_path / "a", None)
    assert code == 0 and written == {"features": {"containerd-snapshotter": True},
                                     "builder": {"history": {"maxAge": "10m", "maxEntries": 50}}}
    user = '{"features": {"buildkit": true}, "builder": {"history": {"maxAge": "48h"}, "gc": {"enabled": true}}, "debug": true}'
    code, _, written = engine_settings(tmp_path / "b", user)
    assert code == 0 and written == {"features": {"buildkit": True, "containerd-snapshotter": True},
                                     "builder": {"history": {"maxAge": "48h", "maxEntries": 50}, "gc": {"enabled": True}},
                                     "debug": True}
    code, message, written = engine_settings(tmp_path / "c", "[]")
    assert code == 2 and "holds no JSON object" in message and written == []
    code, message, written = engine_settings(tmp_path / "d", '{"features": ')  # left as it is, said plainly
    assert code == 2 and "is not JSON (Expecting value: line 1" in message and "Traceback" not in message
    assert written == '{"features": '


def run_engine_settings(settings) -> tuple[int, str]:
    """scripts/engine_settings.py run on ``settings`` as ensure-engine.sh runs it: its exit status and error output."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ENGINE_SETTINGS.with_name("engine_settings.py")), str(settings)],
                          capture_output=True, text=True)
    return done.returncode, done.stderr


def daemon_json(tmp_path, text: str = '{"debug": true}') -> Path:
    settings = tmp_path / "etc" / "docker" / "daemon.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(text)
    return settings


def test_a_daemon_json_that_is_a_symbolic_link_is_written_where_it_points(tmp_path):
    import json

    target = daemon_json(tmp_path / "srv")
    link = tmp_path / "etc" / "docker" / "daemon.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    assert run_engine_settings(link) == (0, "")
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["features"] == {"containerd-snapshotter": True}


def test_no_file_already_beside_daemon_json_is_written_through(tmp_path):
    """A `daemon.json.torchbake-new` left there, a link to another file: that file is untouched,
    daemon.json stays a file of its own."""
    import json

    settings = daemon_json(tmp_path)
    other = tmp_path / "other"
    other.write_text("precious\n")
    (settings.parent / "daemon.json.torchbake-new").symlink_to(other)
    assert run_engine_settings(settings) == (0, "")
    assert other.read_text() == "precious\n"
    assert not settings.is_symlink() and json.loads(settings.read_text())["debug"] is True


def test_daemon_json_keeps_its_mode_and_owner_and_a_new_one_is_0644(tmp_path):
    settings = daemon_json(tmp_path)
    os.chown(settings, 1234, 1235)
    settings.chmod(0o640)
    assert run_engine_settings(settings) == (0, "")
    after = settings.stat()
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == (0o640, 1234, 1235)
    assert "containerd-snapshotter" in settings.read_text()
    new = tmp_path / "new" / "daemon.json"
    assert run_engine_settings(new) == (0, "")
    assert stat.S_IMODE(new.stat().st_mode) == 0o644


def test_a_read_only_daemon_json_is_refused_and_left_as_it_is(tmp_path):
    settings = daemon_json(tmp_path)
    settings.chmod(0o444)
    code, message = run_engine_settings(settings)
    assert code == 2 and f"{settings} is read-only (mode 0444)" in message and "Traceback" not in message
    assert settings.read_text() == '{"debug": true}' and os.listdir(settings.parent) == ["daemon.json"]


def test_an_immutable_daemon_json_is_refused_and_no_new_file_left(tmp_path, monkeypatch, capsys):
    """chattr +i where the file system has it; else the error an immutable file gives (EPERM) made."""
    import errno
    import importlib.util
    import shutil
    import subprocess

    settings = daemon_json(tmp_path)
    spec = importlib.util.spec_from_file_location("engine_settings", ENGINE_SETTINGS.with_name("engine_settings.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    immutable = bool(shutil.which("chattr")) and subprocess.run(["chattr", "+i", str(settings)],
                                                                 capture_output=True, check=False).returncode == 0
    if not immutable:
        def refuse(*_args):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        monkeypatch.setattr(os, "replace", refuse)
    try:
        code = script.main(str(settings))
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(settings)], check=True)
    assert code == 2 and f"{settings} cannot be written (Operation not permitted; is it immutable" in capsys.readouterr().err
    assert settings.read_text() == '{"debug": true}' and os.listdir(settings.parent) == ["daemon.json"]


@pytest.mark.parametrize("bad, why", [(b'{"debug": "\xff"}', "is not UTF-8 (byte 0xff at offset 11)"),
                                      (None, "is a folder, not a file"),
                                      ("fifo", "is not a regular file"),  # a reader of it would wait for ever
                                      (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                       "nests deeper than any dockerd setting does"),
                                      (b'{"debug": NaN}', "is not JSON (NaN is not a JSON number)"),
                                      (b'{"max": 1e400}', "is not JSON (1e400 is past the largest number dockerd reads)")])
def test_a_daemon_json_that_is_not_utf8_or_a_folder_is_said_plainly(tmp_path, bad, why):
    settings = tmp_path / "daemon.json"
    if bad is None:
        settings.mkdir()
    elif bad == "fifo":
        os.mkfifo(settings)
    else:
        settings.write_bytes(bad)
    code, message = run_engine_settings(settings)
    assert code == 2 and f"{settings} {why}" in message and "Traceback" not in message, message
    assert settings.is_dir() if bad is None else settings.is_fifo() if bad == "fifo" else settings.read_bytes() == bad
    assert sorted(os.listdir(tmp_path)) == ["daemon.json"]


def test_keys_are_matched_as_dockerd_matches_them(tmp_path):
    """Go's encoding/json reads "Builder" and "History" as builder and history: ours go under the
    user's spelling, not beside it. The keys of "features", a Go map, are matched exactly."""
    import json

    user = '{"Builder": {"History": {"MaxAge": "1h"}, "GC": {"enabled": true}}, "features": {"Containerd-Snapshotter": false}}'
    settings = daemon_json(tmp_path, user)
    assert run_engine_settings(settings) == (0, "")
    assert json.loads(settings.read_text()) == {
        "Builder": {"History": {"MaxAge": "1h", "maxEntries": 50}, "GC": {"enabled": True}},
        "features": {"Containerd-Snapshotter": False, "containerd-snapshotter": True}}
