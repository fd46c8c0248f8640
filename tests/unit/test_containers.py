"""run-container's logic without an engine: names, sizes, options, device profiles and the exact
docker commands planned for each state a container can be in."""

from __future__ import annotations

import dataclasses

import pytest

from torchbake.checks.devices import DeviceAccess, HostDevices, device_access
from torchbake.configuration import validation
from torchbake.core.errors import ConfigurationError, ContainerError
from torchbake.planning.config import resolve
from torchbake.running import containers
from torchbake.running.containers import (
    Mount,
    RunRequest,
    default_name,
    format_size,
    parse_env,
    plan_session,
    shm_bytes,
)

IMAGE = "torchbake/pytorch-cpu:2.13.0-py3.11"
IMAGE_ID = "sha256:" + "a" * 64
GIB = 1 << 30
LABELS = ["--label", "torchbake.container=true", "--label", f"torchbake.image={IMAGE}",
          "--label", "torchbake.device-profile=cpu", "--label", "torchbake.version=0.1.0"]


def request(**fields) -> RunRequest:
    settings = resolve([], {}, {}).settings()
    base = dict(command="", remove=False, replace=False, interactive=False, forward_stdin=False)
    extra = {k: fields.pop(k) for k in ("extra_env", "extra_mounts") if k in fields}
    run = settings.run
    override = {k: fields.pop(k) for k in list(fields) if k in run.__dataclass_fields__}
    if override:
        settings = dataclasses.replace(settings, run=dataclasses.replace(run, **override))
    return RunRequest.from_settings(settings, fields.pop("image", IMAGE), **extra, **{**base, **fields})


def plan(req: RunRequest, existing=None, devices=DeviceAccess(), profile="cpu", shm=8 * GIB):
    return plan_session(req, binary="docker", image_id=IMAGE_ID, name="box", profile=profile,
                        devices=devices, shm=shm, existing=existing)


def existing(status="running", image=IMAGE_ID, ours=True, shm=8 * GIB, created_from=IMAGE, **labels):
    return {"Name": "/box", "Image": image, "State": {"Status": status},
            "Config": {"Image": created_from, "Labels": {"torchbake.container": "true", **labels} if ours else {}},
            "HostConfig": {"ShmSize": shm, "Privileged": False}, "Mounts": []}


@pytest.mark.parametrize(("image", "name", "earlier"), [
    (IMAGE, "torchbake-pytorch-cpu-2.13.0-py3.11", "pytorch-cpu-2.13.0-py3.11"),
    ("registry.local:5000/team/torch-musa", "team-torch-musa-latest", "torch-musa-latest"),
    ("localhost/a/torch:1", "a-torch-1", "torch-1"),
    ("torch@sha256:" + "b" * 64, "torch-bbbbbbbbbbbb", "torch-bbbbbbbbbbbb"),
    ("localhost:5000/a/torch:1@sha256:" + "c" * 64, "a-torch-cccccccccccc", "torch-cccccccccccc"),  # tag and digest
    ("4abc215f68de", "torchbake-4abc215f68de", "torchbake-4abc215f68de"),
])
def test_default_name_is_the_users_and_comes_from_the_images_whole_repository(image, name, earlier):
    """Each user's container of an image is their own: on a GPU machine a team shares, the name
    everyone's run-container picked was the same; and a/pytorch and b/pytorch were one name."""
    assert default_name(image, "alice") == f"alice-{name}"
    assert containers.earlier_name(image) == earlier  # named when such a container exists
    validation.container_name(default_name(image, "alice"))


@pytest.mark.parametrize(("user", "prefix"), [("alice", "alice"), ("DOMAIN\\bob smith", "DOMAIN-bob-smith"),
                                               ("", "uid"), ("..", "uid")])
def test_the_user_name_is_one_a_container_name_may_hold(monkeypatch, user, prefix):
    monkeypatch.setattr("getpass.getuser", lambda: user)
    found = containers.user_name()
    assert found.startswith(prefix)
    validation.container_name(f"{found}-x")


@pytest.mark.parametrize(("text", "size"), [("80G", 80 * GIB), ("512m", 512 << 20), ("1.5GB", 3 * GIB // 2),
                                            ("8GiB", 8 * GIB), ("65536", 65536)])
def test_sizes_read_as_docker_reads_them(text, size):
    assert validation.byte_size(text) == size


@pytest.mark.parametrize("text", ["lots", "0", "-1G", "8 GBs", "", "1e9"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError, match="expected a size such as 512M, 8G or 80G"):
        validation.byte_size(text)


def test_sizes_print_in_the_largest_whole_unit():
    assert [format_size(n) for n in (80 * GIB, 200 << 20, 3 << 10, 1000)] == ["80g", "200m", "3k", "1000"]


def test_auto_shm_is_half_the_host_memory_in_whole_gib():
    assert shm_bytes(request(), 24 * GIB - 12345) == 11 * GIB
    assert shm_bytes(request(), 1 * GIB) == 1 * GIB  # never below 1 GiB
    assert shm_bytes(request(shm_size="80G"), 4 * GIB) == 80 * GIB


@pytest.mark.parametrize(("item", "message"), [
    ("FOO", "--env 'FOO' is not KEY=VALUE, e.g. --env CUDA_LAUNCH_BLOCKING=1."),
    ("=1", "--env '=1' is not KEY=VALUE"),
    ("1X=2", "--env '1X=2': '1X' is not a valid environment variable name"),
])
def test_malformed_env_is_named(item, message):
    with pytest.raises(ConfigurationError) as error:
        parse_env([item])
    assert str(error.value).startswith(message)


def test_env_values_may_hold_equals_signs():
    assert parse_env(["OPTS=a=b", "EMPTY="]) == {"OPTS": "a=b", "EMPTY": ""}


def test_mounts_need_an_existing_host_path(tmp_path):
    assert Mount.parse(f"{tmp_path}:/data:ro", "--mount").argument() == f"type=bind,source={tmp_path},target=/data,readonly"
    with pytest.raises(ConfigurationError) as error:
        Mount.parse(f"{tmp_path}/missing:/data", "--mount")
    assert f"the host path {tmp_path}/missing does not exist" in str(error.value)
    for spec in ("data", f"{tmp_path}:relative", f"{tmp_path}:/data:rx"):
        with pytest.raises(ConfigurationError, match="expected HOST:CONTAINER or HOST:CONTAINER:ro"):
            Mount.parse(spec, "--mount")


def test_run_options_are_checked_with_the_config():
    with pytest.raises(ConfigurationError) as error:
        resolve([], {"TORCHBAKE_RUN_SHM_SIZ": "8G"}, {})
    assert "Did you mean 'TORCHBAKE_RUN_SHM_SIZE'?" in str(error.value)
    with pytest.raises(ConfigurationError, match="run.device_profile = 'ipu'"):
        resolve([], {}, {"run.device_profile": "ipu"})
    with pytest.raises(ConfigurationError, match="run.name = 'my box'"):
        resolve([], {}, {"run.name": "my box"})


# -- device profiles -------------------------------------------------------------------------------

def host(runtimes=("runc",), local=True, **nodes):
    return HostDevices(tuple(runtimes), local, {f"/dev/{k.replace('__', '/')}": v for k, v in nodes.items()})


def test_device_profiles_give_their_docker_arguments():
    assert device_access("cpu", host()).flags() == ()
    assert device_access("cuda", host(("nvidia", "runc"), nvidiactl=0)).flags() == ("--gpus", "all")
    assert device_access("rocm", host(kfd=110, dri=0, dri__renderD128=109)).flags() == (
        "--device", "/dev/kfd", "--device", "/dev/dri", "--security-opt", "seccomp=unconfined",
        "--group-add", "109", "--group-add", "110")
    assert device_access("musa", host(dri=0)).flags() == ("--privileged", "--env", "MTHREADS_VISIBLE_DEVICES=all")
    # An engine elsewhere (DOCKER_HOST): its /dev cannot be seen from here.
    assert device_access("rocm", host(local=False)).flags()[:4] == ("--device", "/dev/kfd", "--device", "/dev/dri")


@pytest.mark.parametrize(("profile", "devices", "message"), [
    ("cuda", host(), "The cuda device profile needs the NVIDIA Container Toolkit on the engine's host"),
    ("cuda", host(("nvidia",)), "/dev/nvidiactl does not exist on this host"),
    ("rocm", host(dri=0), "The rocm device profile needs /dev/kfd on this host, which does not exist"),
    ("rocm", host(), "needs /dev/kfd and /dev/dri on this host, which do not exist"),
    ("musa", host(), "The musa device profile needs a Moore Threads GPU"),
])
def test_missing_host_support_is_an_error_before_anything_is_created(profile, devices, message):
    with pytest.raises(ContainerError) as error:
        device_access(profile, devices)
    assert message in str(error.value)
    assert "--device-profile cpu" in str(error.value)


# -- the plan for each state -----------------------------------------------------------------------

def test_new_container_is_created_then_entered(tmp_path):
    req = request(extra_env=["A=1"], extra_mounts=[f"{tmp_path}:/work"], workdir="/work", interactive=True)
    session = plan(req)
    assert session.setup == ((
        "docker", "run", "--detach", "--interactive", "--tty", "--name", "box", "--hostname", "box", *LABELS,
        "--shm-size", "8g", "--env", "A=1", "--mount", f"type=bind,source={tmp_path},target=/work",
        "--workdir", "/work", "--entrypoint", "/bin/bash", IMAGE),)
    assert session.attached == ("docker", "exec", "--interactive", "--tty", "--env", "A=1", "--workdir", "/work",
                                "box", "/bin/bash")
    assert session.notes == (f"Creating container box from {IMAGE} (device profile cpu, /dev/shm 8g).",)


def test_throwaway_container_runs_the_command_and_is_removed():
    session = plan(request(command="python -V", remove=True), devices=DeviceAccess(gpus=True), profile="cuda")
    assert session.setup == ()
    assert session.attached == (
        "docker", "run", "--rm", "--name", "box", "--hostname", "box", *LABELS[:5], "torchbake.device-profile=cuda",
        *LABELS[6:], "--shm-size", "8g", "--gpus", "all", "--entrypoint", "/bin/bash", IMAGE, "-c", "python -V")


def test_running_container_gets_a_new_shell_and_a_stopped_one_is_started():
    running = plan(request(command="nvidia-smi"), existing("running"))
    assert (running.setup, running.attached) == ((), ("docker", "exec", "box", "/bin/bash", "-c", "nvidia-smi"))
    stopped = plan(request(forward_stdin=True), existing("exited"))
    assert stopped.setup == (("docker", "start", "box"),)
    assert stopped.attached == ("docker", "exec", "--interactive", "box", "/bin/bash")
    assert stopped.notes == ("Starting stopped container box for the command; it is stopped again when the command"
                             " ends (--keep leaves it running).",)  # a script on standard input: one command
    assert plan(request(interactive=True), existing("exited")).notes == ("Starting stopped container box.",)


def test_a_one_off_command_leaves_no_container_behind_unless_kept():
    """`run-container IMAGE --command …` without --rm created a detached container (with its
    /dev/shm) and left it running. Now: a container it creates is removed when it ends, one it
    starts is stopped again; --keep keeps either; a running one is only entered."""
    one_off = plan(request(command="python -V"))
    assert one_off.throwaway and one_off.setup == () and one_off.attached[:3] == ("docker", "run", "--rm")
    assert "removed when the command ends (--keep keeps it)" in one_off.notes[0]
    kept = plan(request(command="python -V", keep=True))
    assert not kept.throwaway and kept.create and kept.setup[0][:3] == ("docker", "run", "--detach")
    started = plan(request(command="python -V"), existing("exited"))
    assert started.start and started.stop_after and "stopped again when the command ends" in started.notes[0]
    left_running = plan(request(command="python -V", keep=True), existing("exited"))
    assert left_running.start and not left_running.stop_after
    entered = plan(request(command="python -V"), existing("running"))
    assert not (entered.throwaway or entered.start or entered.stop_after or entered.create)
    shell = plan(request(interactive=True))  # a shell's container stays, as always
    assert shell.create and not shell.throwaway
    piped = plan(request(forward_stdin=True))  # a script on standard input is one command too
    assert piped.throwaway


def test_a_container_of_another_image_is_refused_unless_replaced():
    with pytest.raises(ContainerError) as error:
        plan(request(), existing(image="sha256:" + "c" * 64, created_from="debian:12"))
    assert str(error.value) == (
        "Container 'box' was created from image 'debian:12', not 'torchbake/pytorch-cpu:2.13.0-py3.11' (a different image).\n"
        "Add --replace to remove it and create it again, or pass another --name.")
    with pytest.raises(ContainerError, match="created from an earlier torchbake/pytorch-cpu:2.13.0-py3.11"):
        plan(request(), existing(image="sha256:" + "c" * 64))
    replaced = plan(request(replace=True), existing(image="sha256:" + "c" * 64, created_from="debian:12"))
    assert replaced.setup[0] == ("docker", "rm", "--force", "box")
    assert replaced.setup[1][:3] == ("docker", "run", "--detach")


@pytest.mark.parametrize("state", ["running", "exited", "created", "paused"])
@pytest.mark.parametrize("replace", [False, True])
def test_a_container_torchbake_did_not_create_is_never_used(state, replace):
    """As stop-container: never started, entered or replaced; the message names another --name."""
    with pytest.raises(ContainerError) as error:
        plan(request(replace=replace), existing(ours=False, status=state))
    assert str(error.value).startswith("Container 'box' was not created by torchbake")
    assert "run-container leaves it alone. Pass another name, e.g. --name box-torchbake" in str(error.value)


def test_creation_settings_given_again_must_match():
    with pytest.raises(ContainerError) as error:
        plan(request(shm_size="2G", explicit=frozenset({"shm_size"})), existing(), shm=2 * GIB)
    assert "--shm-size: it has 8g, asked 2g" in str(error.value)
    # The same settings coming from the config (not the command line) just reuse the container.
    assert plan(request(shm_size="2G"), existing(), shm=2 * GIB).setup == ()


@pytest.mark.parametrize(("status", "message"), [
    ("paused", "Container 'box' is paused. Resume it with `docker unpause box`"),
    ("restarting", "Container 'box' is restarting; `docker logs box` may say why."),
    ("dead", "Container 'box' is dead;"),
])
def test_containers_in_odd_states_are_explained(status, message):
    with pytest.raises(ContainerError) as error:
        plan(request(), existing(status))
    assert str(error.value).startswith(message)


def test_throwaway_run_never_takes_an_existing_name():
    with pytest.raises(ContainerError, match="A container named 'box' already exists; --rm runs a new"):
        plan(request(remove=True), existing())


@pytest.mark.parametrize("host", ["/dev/" + "a" * 100_000, "/tmp/" + "b" * 300, "~no-such-user-here/data"])
def test_a_host_path_that_cannot_be_looked_at_is_refused_naming_the_flag_before_anything_starts(host):
    """A name over 255 bytes or a path over 4096 was an OSError traceback (File name too long);
    the value is named, cut to be read."""
    for origin, fields in (("--mount", {"extra_mounts": [f"{host}:/data"]}), ("run.mounts", {"mounts": (f"{host}:/data",)})):
        with pytest.raises(ConfigurationError) as refused:
            request(**fields)
        message = str(refused.value)
        assert message.startswith(f"{origin} {f'{host}:/data'[:100]!r}" if len(host) > 100 else f"{origin} '{host}:/data'")
        assert "the host path cannot be looked at" in message and len(message) < 400, message


def test_a_declared_device_path_that_cannot_be_looked_at_is_refused_naming_its_accelerator(tmp_path, monkeypatch):
    from torchbake.checks import devices
    from torchbake.configuration import accelerators

    monkeypatch.setattr(devices, "engine_is_local", lambda: True)
    (tmp_path / "dev").mkdir()
    many = {"devices": ["/dev" + "/d" * 300]}  # 300 parts: looked up, not globbed part by part (a RecursionError)
    assert devices.host_devices({}, accelerators.parse({"deep": {"description": "x", "devices": many}}, "own.toml")
                                .values(), root=tmp_path).nodes == {}
    for table in ({"devices": ["/dev/" + "a" * 100_000]}, {"any_of": ["/dev/" + "d" * 300 + "/x*"]},
                  {"any_of": ["/dev" + "/d" * 1500 + "/x*"]}):
        declared = accelerators.parse({"huge": {"description": "x", "devices": table}}, "own.toml")
        with pytest.raises(ConfigurationError) as refused:
            devices.host_devices({}, declared.values(), root=tmp_path)
        message = str(refused.value)
        assert message.startswith("own.toml: [accelerators.huge] devices: '/dev/") and "cannot be looked at" in message
        assert len(message) < 400, message
