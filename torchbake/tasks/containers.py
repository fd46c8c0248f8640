"""``invoke run-container``, ``invoke containers`` and ``invoke stop-container``."""

from __future__ import annotations

import sys

from invoke import Collection, Exit, task

from .. import output
from ..cli import COMMON_HELP, FlagTask, docker_client, reports_errors, resolve_config
from ..command import format_command
from ..errors import ConfigurationError
from ..lazy import LazyModule

running = LazyModule("torchbake.containers")  # imported when a task runs (see tasks/build.py)

RUN_HELP = {
    **COMMON_HELP,
    "image": "Image to run, NAME:TAG or id (its torchbake.profile label picks the device profile);"
             " default the image of this host's most recent successful build",
    "name": "Container name; reused if it exists (started if stopped). [run] name, default <repository>-<tag>",
    "shm_size": "Size of /dev/shm, e.g. 80G; under 1G warns (DataLoader workers need it). [run] shm_size, default auto = half the host's memory",
    "privileged": "Give the container every host device and capability. [run] privileged",
    "env": "KEY=VALUE for the container and this shell; repeatable, adds to [run] env",
    "mount": "Bind mount HOST:CONTAINER or HOST:CONTAINER:ro (HOST must exist); repeatable, adds to [run] mounts",
    "workdir": "Working directory in the container. [run] workdir, default the image's",
    "device_profile": "cpu | cuda (--gpus all) | rocm (/dev/kfd, /dev/dri) | musa (privileged, MTHREADS_VISIBLE_DEVICES=all); default the image's profile",
    "rm": "Run a throwaway container, removed when the shell or command ends",
    "command": "Run this with SHELL -c instead of an interactive shell; its exit status becomes this task's",
    "replace": "Remove a container of this name that torchbake created (other image or settings) and create it again",
    "dry_run": "Print the docker commands and create nothing",
}


@task(klass=FlagTask, help=RUN_HELP, positional=["image"], optional_positional=["image"], iterable=["env", "mount", "config"],
      names={"shm_size": ["shm_size"], "device_profile": ["device_profile"], "dry_run": ["dry_run"]})
@reports_errors
def run_container(c, image=None, name=None, shm_size=None, privileged=False, env=None, mount=None, workdir=None,
                  device_profile=None, rm=False, command=None, replace=False, dry_run=False, config=None,
                  docker=None):
    """Open a shell (or run --command) in a container of IMAGE, created once and reused.

    The container gets the /dev/shm and devices its profile needs; a stopped one is started again,
    a running one gets a new shell. Without a terminal, --command runs and its exit status is this
    task's. Without IMAGE: the image of this host's most recent successful build."""
    cli = {"run.name": name, "run.shm_size": shm_size, "run.privileged": True if privileged else None,
           "run.workdir": workdir, "run.device_profile": device_profile, "build.docker": docker}
    settings = resolve_config(config, cli).settings()
    if command is not None and not command.strip():
        raise ConfigurationError("--command is empty; give the command to run, e.g. --command 'python -V',"
                                 " or leave --command out for an interactive shell.")
    stdin = running.standard_input_kind()
    interactive = stdin == "terminal" and sys.stdout.isatty()
    if not interactive and not command and stdin != "data":
        raise ConfigurationError(
            "Standard input is not a terminal, so there is no one to type into a shell: pass"
            ' --command "…" (its exit status becomes this task\'s), or run from a terminal.'
        )
    # stdout is the command's alone: torchbake's notes and the docker commands it runs go to stderr
    with output.channel_to(output.Channel(output.console(stderr=True))) as notes:
        status, session = _run_session(settings, image, request_fields={
            "extra_env": env or [], "extra_mounts": mount or [], "command": command or "", "remove": rm,
            "replace": replace, "interactive": interactive, "forward_stdin": stdin != "none",
            "explicit": frozenset({key.split(".", 1)[1] for key, value in cli.items() if value is not None}
                                  | ({"mounts"} if mount else set()))}, dry_run=dry_run)
        if status:
            if not interactive:
                notes.say(f"torchbake: the command exited with status {status} in container {session.name}.")
            raise Exit(code=status)


def _run_session(settings, image: str, *, request_fields: dict, dry_run: bool) -> tuple[int, running.Session]:
    client = docker_client(settings, for_build=False)
    if not image:
        image = running.most_recent_image(client, settings.paths.log_dir)
        output.channel().say(f"torchbake: no IMAGE given; using {image}, the most recent successful build on this host.")
    session = running.prepare_session(client, running.RunRequest.from_settings(settings, image, **request_fields))
    for note in session.notes:
        output.channel().say(note)
    if dry_run:  # the commands, on stdout: a user can paste them
        output.result("".join(format_command(argv) + "\n" for argv in (*session.setup, session.attached)))
        return 0, session
    return running.run_session(client, session), session


@task(klass=FlagTask, help=COMMON_HELP, iterable=["config"])
@reports_errors
def containers(c, docker=None, config=None):
    """List the containers torchbake created: name, image, status, device profile."""
    settings = resolve_config(config, {"build.docker": docker}).settings()
    client = docker_client(settings, for_build=False)
    client.check_engine()
    rows = running.list_containers(client)
    out = output.channel()
    if not rows:
        out.say("No containers created by torchbake. `invoke run-container IMAGE` makes one.")
        return
    table = output.table(title="containers created by torchbake")
    for column in ("name", "image", "status", "profile", "created"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(row[column] for column in ("name", "image", "status", "profile", "created")))
    out.show(table)


@task(klass=FlagTask, positional=["name"], iterable=["config"], help={
    **COMMON_HELP,
    "name": "Container to stop (one torchbake created; `invoke containers` lists them)",
    "rm": "Also remove it",
    "time": "Seconds to wait for it to stop before it is killed (default 10)",
    "docker": "Docker client binary (default: auto)",
    "config": "TOML config file layered over the defaults; repeatable",
})
@reports_errors
def stop_container(c, name, rm=False, time=10, docker=None, config=None):
    """Stop a container torchbake created; with --rm, remove it too."""
    settings = resolve_config(config, {"build.docker": docker}).settings()
    if time < 0:
        raise ConfigurationError(f"--time {time}: expected a number of seconds, 0 or more.")
    client = docker_client(settings, for_build=False)
    running.stop_container(client, name, remove=rm, timeout=time)

ns = Collection(run_container, containers, stop_container)
