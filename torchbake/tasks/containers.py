"""``invoke run-container``, ``invoke containers`` and ``invoke stop-container``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from invoke import Collection, Exit

from torchbake.adapters.command import format_command
from torchbake.configuration.options import CONTAINERS_FLAGS, RUN_CONTAINER_FLAGS, STOP_CONTAINER_FLAGS, overrides
from torchbake.core import output
from torchbake.core.errors import ConfigurationError
from torchbake.core.lazy import LazyModule
from torchbake.tasks.cli import docker_client, flag_task, reports_errors, resolve_config

if TYPE_CHECKING:
    from torchbake.running import containers as running
else:
    running = LazyModule("torchbake.running.containers")  # imported when a task runs (see tasks/build.py)

@flag_task(*RUN_CONTAINER_FLAGS, optional_positional=("image",))
@reports_errors
def run_container(c, **given):
    """Open a shell (or run --command) in a container of IMAGE.

    The container (default name: your user name, the image's repository and tag) is created once
    and reused. It gets the /dev/shm and devices its profile needs; a stopped one is started
    again, a running one gets a new shell. --command runs one command, its exit status this
    task's: in the container if it exists, else in one removed when it ends (--keep keeps it).
    Without IMAGE: the image of this host's most recent successful build."""
    cli = overrides(RUN_CONTAINER_FLAGS, given)
    settings = resolve_config(given["config"], cli).settings()
    image, command, env, mount, dry_run = (given[k] for k in ("image", "command", "env", "mount", "dry_run"))
    if given["keep"] and given["rm"]:
        raise ConfigurationError("--keep and --rm contradict each other: --rm removes the container when it ends,"
                                 " --keep keeps it. Give one of them.")
    if command is not None and not command.strip():
        raise ConfigurationError("--command is empty; give the command to run, e.g. --command 'python -V',"
                                 " or leave --command out for an interactive shell.")
    stdin = running.standard_input_kind()
    interactive = stdin == "terminal" and sys.stdout.isatty()
    if given["keep"] and command is None and interactive:
        raise ConfigurationError("--keep keeps the container a --command creates or starts; an interactive shell's"
                                 " container is always kept. Add --command '…', or leave --keep out.")
    if not interactive and not command and stdin != "data":
        raise ConfigurationError(
            "Standard input is not a terminal, so there is no one to type into a shell: pass"
            ' --command "…" (its exit status becomes this task\'s), or run from a terminal.'
        )
    # stdout is the command's alone: torchbake's notes and the docker commands it runs go to stderr
    with output.channel_to(output.Channel(output.console(stderr=True))) as notes:
        status, session = _run_session(settings, image, request_fields={
            "extra_env": env or [], "extra_mounts": mount or [], "command": command or "", "remove": given["rm"],
            "keep": given["keep"], "replace": given["replace"], "interactive": interactive, "forward_stdin": stdin != "none",
            "explicit": frozenset({key.split(".", 1)[1] for key in cli}
                                  | ({"mounts"} if mount else set()))}, dry_run=dry_run)
        if status:
            if not interactive:
                notes.say(f"torchbake: the command exited with status {status} in container {session.name}.")
            raise Exit(code=status)


def _run_session(settings, image: str, *, request_fields: dict, dry_run: bool) -> tuple[int, running.Session]:
    client = docker_client(settings, for_build=False, writes=not dry_run)
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


@flag_task(*CONTAINERS_FLAGS)
@reports_errors
def containers(c, **given):
    """List the containers torchbake created.

    Each with its name, image, status and device profile."""
    settings = resolve_config(given["config"], overrides(CONTAINERS_FLAGS, given)).settings()
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


STOP_TIME_LIMIT = 86_400  # stop-container --time: the seconds a container may take to stop before it is killed


@flag_task(*STOP_CONTAINER_FLAGS)
@reports_errors
def stop_container(c, **given):
    """Stop a container torchbake created.

    With --rm, remove it too."""
    settings = resolve_config(given["config"], overrides(STOP_CONTAINER_FLAGS, given)).settings()
    if not 0 <= given["time"] <= STOP_TIME_LIMIT:  # past it the engine's client overflows (a traceback)
        raise ConfigurationError(f"--time {given['time']}: expected a number of seconds from 0 to {STOP_TIME_LIMIT:,}"
                                 " (a day).")
    client = docker_client(settings, for_build=False)
    running.stop_container(client, given["name"], remove=given["rm"], timeout=given["time"])

ns = Collection(run_container, containers, stop_container)
