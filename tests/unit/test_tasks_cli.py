"""The invoke layer: flags (old spellings included) reach the right options; help for every flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Collection

import tasks
from tests.conftest import ROOT, run_invoke


def test_root_collection_only_composes_the_task_modules():
    assert isinstance(tasks.ns, Collection)
    assert sorted(tasks.ns.task_names) == ["bootstrap-os", "build", "build-all", "build-base", "containers", "diff",
                                           "gc", "lock", "provenance", "run-container", "sbom", "show-build", "show-config",
                                           "stop-container", "verify"]


def test_the_task_collection_imports_no_task_s_work():
    """invoke imports every task module to parse any command line: the work behind a task (builds,
    the matrix runner, gc, containers, debootstrap, progress bars and tables) is imported only when a
    task runs, so that a command refused for its flags starts fast."""
    probe = ("import sys, tasks; print(' '.join(sorted(m for m in sys.modules if m.startswith(('torchbake.', 'rich.',"
             " 'filelock', 'docker', 'plumbum')))))")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    work = ("torchbake.planning.config", "torchbake.configuration.derived", "torchbake.building.builder", "torchbake.variants", "torchbake.fleet.runner", "torchbake.housekeeping.cleanup", "torchbake.running.containers",
            "torchbake.inputs.base_os", "torchbake.inputs.wheelhouse", "torchbake.inputs.downloads", "rich.progress", "rich.table",
            "filelock", "docker", "plumbum")
    assert [m for m in loaded if m in work] == []
    assert "torchbake.tasks.cli" in loaded and "torchbake.tasks.build" in loaded  # the probe saw the task modules


@pytest.mark.parametrize("name", ["build", "build-base", "build-all", "verify", "show-config", "bootstrap-os",
                                  "run-container", "containers", "stop-container", "show-build", "gc"])
def test_every_flag_has_help(name):
    task = tasks.ns.tasks[name]
    params = [p for p in task.argspec(task.body).parameters if p != "c"]
    for arg in task.get_arguments():
        assert arg.help, f"{name} --{arg.name} has no help"
    assert len(task.get_arguments()) == len(params)


def test_legacy_short_flags_map_to_options():
    result = run_invoke("build", "-n", "team/torch", "-t", "nightly", "-b", "debian:12", "-v", "3.11", "-r",
                        "--torch-whl-url", "torch==2.13.0", "-m", "https://h.invalid/musa.tar.gz", "--dry-run",
                        "--docker", "/usr/bin/docker")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Plan for team/torch:nightly (release, profile cpu)" in out
    assert "base image      debian:12" in out
    assert "python          3.11 (provider os)" in out
    assert "musa_toolkits_url https://h.invalid/musa.tar.gz" in out
    assert "--build-arg BASE_IMAGE=debian:12" in out


def test_command_line_beats_environment_and_config():
    result = run_invoke("build", "--config", "configs/cpu.toml", "--tag", "cli", "--dry-run",
                        "--docker", "/usr/bin/docker", env={"TORCHBAKE_IMAGE_TAG": "env", "TORCHBAKE_PYTHON_VERSION": "3.11"})
    assert result.returncode == 0, result.stderr
    assert "Plan for torchbake/pytorch-cpu:cli" in result.stdout


def test_a_dry_run_says_it_would_build_again_to_compare_when_asked():
    plain = run_invoke("build", "--release", "--dry-run", "--docker", "/usr/bin/docker")
    checked = run_invoke("build", "--release", "--dry-run", "--check-reproducible", "--docker", "/usr/bin/docker")
    assert plain.returncode == checked.returncode == 0, plain.stderr + checked.stderr
    assert "again with --no-cache" not in plain.stdout
    assert "Then build the same context again with --no-cache under another candidate tag" in checked.stdout


def test_show_config_names_sources():
    result = run_invoke("show-config", "--config", "configs/cpu.toml", env={"TORCHBAKE_IMAGE_TAG": "from-env"})
    assert result.returncode == 0, result.stderr
    lines = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.count("│") == 4}
    assert "configs/cpu.toml" in lines["wheels.torch"]
    assert "environment" in lines["image.tag"] and "from-env" in lines["image.tag"]
    assert "default" in lines["build.verify"]


def test_no_engine_answering_is_a_clear_error():
    result = run_invoke("verify", "any:image", env={"DOCKER_HOST": "unix:///tmp/torchbake-no-such.sock"})
    assert result.returncode == 4
    assert "No Docker engine answers at unix:///tmp/torchbake-no-such.sock" in result.stderr
    assert "scripts/ensure-engine.sh" in result.stderr
    assert "Traceback" not in result.stderr


def _typed_flags():
    """(task, flag) for every flag of every task whose value invoke converts (ints, numbers)."""
    import copy
    found = []
    for name in sorted(tasks.ns.task_names):
        for argument in copy.deepcopy(tasks.ns[name]).get_arguments():
            if argument.kind in (int, float):
                found.append((name, "--" + argument.name.replace("_", "-")))
    return found


@pytest.mark.parametrize(("task", "flag"), _typed_flags())
@pytest.mark.parametrize("value", ["not-a-number", "1_0"])  # (int("1_0") is 10 to Python, not to a user)
def test_a_value_of_the_wrong_type_for_any_flag_is_a_clear_error_exit_2(task, flag, value):
    result = run_invoke(task, flag, value, *(["IMAGE"] if task in ("verify", "show-build") else []))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"torchbake: error: {flag} {value!r}: expected a whole number." in result.stderr
    assert f"`invoke --help {task}` lists its flags." in result.stderr


# Every long and short flag of the scripts torchbake replaces (../shared/docs/legacy-scripts.md),
# as the scripts spelled it: (task, spelling, a value or None for a switch, the parameter it sets)
LEGACY_SPELLINGS = [
    *((task, flag, "x", "name") for task in ("build-base", "build") for flag in ("-n", "--name")),
    *(("build", flag, "x", "name") for flag in ("-i", "--image_docker_name")),
    *((task, flag, "x", "tag") for task in ("build-base", "build") for flag in ("-t", "--tag")),
    *(("build-base", flag, "ubuntu:22.04", "sys") for flag in ("-s", "--sys")),
    *((task, flag, "3.10", "python") for task in ("build-base", "build")
      for flag in ("-v", "--python_version", "--python_verison")),
    *(("build", flag, "debian:12", "base_img") for flag in ("-b", "--base_img")),
    *(("build", flag, "d.dockerfile", "docker_file") for flag in ("-f", "--docker_file")),
    *(("build", flag, "https://h.invalid/m.tar.gz", "musa_toolkits_url") for flag in ("-m", "--musa_toolkits_url")),
    ("build", "--mudnn_url", "https://h.invalid/d.tar.gz", "mudnn_url"),
    ("build", "--mccl_url", "https://h.invalid/c.tar.gz", "mccl_url"),
    *(("build", flag, None, "release") for flag in ("-r", "--release")),
    ("build", "--torch_whl_url", "torch==2.13.0", "torch_whl_url"),
    ("build", "--torch_musa_whl_url", "https://h.invalid/t.whl", "torch_musa_whl_url"),
    ("build", "--torch_musa_tag", "dev1.5.1", "torch_musa_tag"),
    *(("build", flag, "creds", "git_credential_file") for flag in ("-c", "--git_credential_file")),
    ("build", "--no_prepare", None, "no_prepare"),
]


@pytest.mark.parametrize(("task", "spelling", "value", "param"), LEGACY_SPELLINGS)
def test_every_spelling_of_the_legacy_scripts_sets_its_flag(task, spelling, value, param):
    """Parsed as invoke (and the torchbake command, the same parser) parses it: the underscore
    spellings are the dash flags', the short flags the scripts' own."""
    from invoke.parser import Parser, ParserContext

    collection = tasks.ns if hasattr(tasks, "ns") else Collection.from_module(tasks)
    contexts = [ParserContext(name=name, aliases=t.aliases, args=t.get_arguments())
                for name, t in collection.tasks.items()]
    parsed = Parser(contexts=contexts).parse_argv([task, spelling, *([value] if value else [])])
    (context,) = parsed
    assert context.args[param].value == (value or True)
    if spelling.startswith("--") and value:
        parsed = Parser(contexts=contexts).parse_argv([task, f"{spelling}={value}"])
        assert parsed[0].args[param].value == value


@pytest.mark.parametrize("command", ["invoke", "torchbake"])
def test_the_seeds_commands_plan_as_typed_with_the_scripts_spellings(command):
    """build.sh's own spelling of a release, through both commands: the plan of its dash spelling."""
    typed = ["build", "-r", "--base_img", "debian:12", "--python_version", "3.11", "--torch_whl_url", "torch==2.13.0",
             "--image_docker_name", "team/torch", "--dry-run", "--docker", "/usr/bin/docker"]
    from torchbake.configuration.options import UNSHOWN_SPELLINGS

    dashed = [UNSHOWN_SPELLINGS.get(word.replace("_", "-"), word.replace("_", "-")) if word.startswith("--") else word
              for word in typed]
    run = ((lambda *a: run_invoke(*a)) if command == "invoke" else
           (lambda *a: subprocess.run([str(Path(sys.executable).with_name("torchbake")), *a], capture_output=True,
                                      text=True, cwd=ROOT)))
    as_typed, as_dashed = run(*typed), run(*dashed)
    assert as_typed.returncode == 0, as_typed.stderr
    assert "Plan for team/torch:" in as_typed.stdout
    # the same plan; its hints repeat the flags as they were typed
    assert as_typed.stdout == as_dashed.stdout.replace(" ".join(dashed[1:10]), " ".join(typed[1:10]))


def test_a_name_past_the_engines_limit_says_the_limit():
    for args, said in ((["verify", "team/" + "a" * 300 + ":1"], "IMAGE 'team/aaaa"),
                       (["build", "--release", "--dry-run", "--name", "b" * 256], "image.name = 'bbbb")):
        result = run_invoke(*args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"torchbake: error: {said}"), result.stderr
        length = 305 if args[0] == "verify" else 256
        assert f"is invalid: the name is {length} characters long; an image name may be at most 255." in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["build", "--tourch-whl-url", "x"], "No idea what '--tourch-whl-url' is! Did you mean --torch-whl-url?"),
    (["biuld"], "No idea what 'biuld' is! Did you mean build?"),
    (["build", "--torch_whl_url"], "--torch_whl_url needs a value."),  # a legacy spelling, last on the line
    (["build", "-s", "ubuntu:22.04"], "No idea what '-s' is! An older build.sh's -s/--sys chose the Dockerfile folder"),
    (["build", "--no-such-flag"], "No idea what '--no-such-flag' is! `invoke --help build` lists its flags."),
    (["verify"], "'verify' did not receive required positional arguments: 'image'. `invoke --help verify`"),
    (["no-such-task"], "No idea what 'no-such-task' is! `invoke --list` lists the tasks."),
    # a mistyped flag where the task still waits for its IMAGE or NAME is that flag, never the argument
    (["verify", "--relase"], "No idea what '--relase' is! `invoke --help verify`"),
    (["run-container", "--comand", "ls"], "No idea what '--comand' is! Did you mean --command?"),
    (["stop-container", "--rn"], "No idea what '--rn' is! Did you mean --rm?"),
    # an argument given twice, as the argument and as its flag (either order), or a second word for it;
    # a mistyped task's name after it is still that (invoke reads several tasks on one line)
    (["verify", "team/x:1", "--image", "team/y:1"], "--image names the IMAGE given already ('team/x:1'): give one"
                                                    " IMAGE, as the argument or as --image IMAGE. `invoke --help verify`"),
    (["verify", "--image", "team/y:1", "team/x:1"], "'team/x:1' is a second IMAGE: it is given already ('team/y:1');"
                                                    " give one IMAGE. `invoke --help verify`"),
    (["stop-container", "one", "two"], "'two' is a second NAME: it is given already ('one'); give one NAME."),
    (["diff", "team/a:1", "team/b:1", "team/c:1"], "'team/c:1' is one word too many: diff takes OLD ('team/a:1') and NEW"
                                                   " ('team/b:1'), given already."),
    (["diff", "team/a:1", "team/b:1", "--old", "team/c:1"], "--old names the OLD given already ('team/a:1')"),
    (["verify", "team/x:1", "biuld"], "No idea what 'biuld' is! Did you mean build?"),
    # invoke's own flags (-R is its --dry, -V its --version) are not the task's
    (["build", "-R", "--dry-run"], "No idea what '-R' is! -R is invoke's own --dry, not a flag of build (invoke's"
                                   " flags go before the task's name)."),
    (["build", "-V", "3.11"], "No idea what '-V' is! -V is invoke's own --version, not a flag of build"),
    (["build", "-T", "3"], "No idea what '-T' is! -T is invoke's own --command-timeout, not a flag of build"),
    # another case, the same flag or task
    (["build", "--NAME", "x"], "No idea what '--NAME' is! Did you mean --name?"),
    (["BUILD-ALL"], "No idea what 'BUILD-ALL' is! Did you mean build-all?"),
    (["build", "-N", "x"], "No idea what '-N' is! `invoke --help build`"),  # -n's case is its name: no -n offered
    # one of the task's own flags, dashed otherwise (another task has it too: it is still this one's)
    (["build", "---name", "x"], "No idea what '---name' is! Did you mean --name?"),
    # another task's flag: which task has it
    (["build", "--plan"], "No idea what '--plan' is! --plan is a flag of build-all, not of build."),
    (["verify", "--release", "img"], "No idea what '--release' is! --release is a flag of build, lock, not of verify."),
    # an empty value (an unset shell variable: --torch-whl-url "$URL") is never "left out", nor the default
    (["build", "--dry-run", "--release", "--torch-whl-url="], "--torch-whl-url '' is empty: give it a value, or leave"
                                                               " the flag out (wheels.torch then comes from"),
    (["run-container", "img", "--name", "", "--dry-run"], "--name '' is empty: give it a value"),
    (["verify", ""], "IMAGE is empty (given ''): name one. `invoke --help verify` lists its flags."),
    (["stop-container", " "], "NAME is empty (given ' '): name one."),
    (["run-container", "", "--command", "true"], "IMAGE is empty (given ''): name one, or leave it out."),
    # a malformed image reference is refused as one, never asked of the engine (its "invalid reference format": exit 4)
    (["verify", "BAD::x"], "IMAGE 'BAD::x' is invalid: expected an image name such as 'torchbake/pytorch-cpu'"),
    (["show-build", "team/x:"], "IMAGE 'team/x:' is invalid: the tag after team/x: is empty"),
    (["diff", "team/x:1", "BAD::x"], "NEW 'BAD::x' is invalid: expected an image name"),
    # an '@' with no digest after it, and a line break at the end (a pattern's $ matches before it)
    (["show-build", "team/x:1@"], "IMAGE 'team/x:1@' is invalid: expected a digest as sha256:<64 hex digits> after '@'"),
    (["build", "--base-img", "team/base:1@", "--dry-run"], "image.base = 'team/base:1@' (from command line) is invalid:"
                                                           " expected a digest as sha256:<64 hex digits> after '@'"),
    (["show-build", "team/x:1\n"], "IMAGE 'team/x:1\\n' is invalid: expected a tag"),
    (["show-build", "@sha256:" + "a" * 64], "IMAGE '@sha256:" + "a" * 64 + "' is invalid: the image name is empty;"
                                            " expected NAME[:TAG][@sha256:DIGEST]"),
    # a registry's port out of range; a --name with a registry host of its own under --registry
    (["build", "--registry", "127.0.0.1:99999/x", "--dry-run"], "registry.url = '127.0.0.1:99999/x' (from command line)"
                                                                 " is invalid: the registry's port 99999 is not a"
                                                                 " number from 1 to 65535"),
    (["build", "--name", "localhost:5000/team/x", "--registry", "127.0.0.1:5300/team", "--dry-run"],
     "--registry 127.0.0.1:5300/team before the image localhost:5000/team/x:"),
    # an OS image pinned by digest is still its release: its Python is checked before any work
    (["build-base", "--sys", "ubuntu:22.04@sha256:" + "a" * 64, "--dry-run"], "Python 3.11 was requested, but the base"
                                                                             " image ubuntu:22.04@sha256:"),
    # a size past the engine's 64 bits (it warned, then the engine refused it: exit 4)
    (["run-container", "img", "--shm-size", "99999999999999999999G", "--command", "true"],
     "run.shm_size = '99999999999999999999G' (from command line) is invalid: expected a size of at most 8,388,607T."),
    (["lock", "--upgrade-package", "Not A Pkg!"], "--upgrade-package 'Not A Pkg!': expected a project's name"),
    (["verify", "img", "--extension-module", "os;rm"], "--extension-module 'os;rm' is invalid: expected a Python module's"),
    # a scope with no budget would cut nothing, silently
    (["gc", "--engine-build-cache", "--dry-run"], "gc.engine_build_cache (--engine-build-cache) makes gc.max_build_cache"
                                                  " (--max-build-cache) the budget of the engine's whole build cache"),
    (["build", "--dry-run", "--config", ""], "--config '' is empty: name a .toml file, or a config torchbake ships"),
    (["build-all", "--plan", "--config", " "], "--config ' ' is empty: name a .toml file"),
    # a switch given a value; words after --
    (["build", "--release", "--no-verify=false"], "--no-verify takes no value (given --no-verify=false)."),
    (["build", "--", "--release"], "torchbake's tasks read no words after `--` (given: --release)."),
    # an empty shard is a bad one, not none
    (["build-all", "--plan", "--shard", ""], "--shard '': expected I/N with 1 <= I <= N, e.g. 1/2."),
    (["build-all", "--emit-matrix", "github", "--shard", ""], "--shard '' picks the one slice a run builds;"),
])
def test_what_invoke_cannot_parse_is_bad_input_exit_2(args, message):
    result = run_invoke(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"torchbake: error: {message}" in result.stderr


@pytest.mark.parametrize(("reference", "hint", "planned"), [
    ("team/nope:x", "`invoke build --name team/nope --tag x` makes it", "Plan for team/nope:x "),
    ("localhost:5000/team/x", "`invoke build --name localhost:5000/team/x` makes it", "Plan for localhost:5000/team/x:latest "),
    ("team/x@sha256:" + "a" * 64, "", ""),  # named by digest: no build makes that
])
def test_a_missing_images_hint_is_the_build_that_makes_that_image(reference, hint, planned):
    """`verify`, `run-container` … of an image the engine lacks: the hint names the command that
    makes that very image (a bare `invoke build` makes torchbake/pytorch-cpu:dev-py3.11)."""
    import shlex

    from torchbake.core.errors import ImageNotFoundError

    message = str(ImageNotFoundError(reference))
    assert message.startswith(f"Image {reference!r} does not exist on this engine. `docker images` lists those that do")
    if not hint:
        assert message.endswith("lists those that do.")
        return
    assert hint in message
    typed = shlex.split(hint.split("`")[1])
    shown = run_invoke(*typed[1:], "--dry-run")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert planned in shown.stdout


def test_more_shards_than_groups_of_cells_are_said_on_stderr_with_the_json_alone_on_stdout():
    """--emit-matrix github --shards 10 on a matrix of 6 groups (a base cell with its dev cells
    stays whole) gives 6 jobs labelled I/10; it says why, on stderr (stdout goes to GITHUB_OUTPUT)."""
    import json

    many = run_invoke("build-all", "--emit-matrix", "github", "--shards", "10")
    assert many.returncode == 0, many.stdout + many.stderr
    jobs = json.loads(many.stdout)["include"]
    assert 1 < len(jobs) < 10 and all(job["shard"].endswith("/10") for job in jobs), jobs
    assert f"--shards 10: the selected cells make {len(jobs)} groups that build apart" in " ".join(many.stderr.split())
    few = run_invoke("build-all", "--emit-matrix", "github", "--shards", "2")
    assert few.returncode == 0 and few.stderr == "", few.stderr
    assert len(json.loads(few.stdout)["include"]) == 2


@pytest.fixture
def hung_engine(tmp_path):
    """A socket that accepts connections and never answers: an engine that hangs."""
    import socket
    path = tmp_path / "hung.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(64)
    yield f"unix://{path}"
    server.close()


@pytest.mark.parametrize("task", [["build", "--release"], ["build-all", "--plan"], ["gc", "--dry-run"]])
def test_a_hung_engine_is_named_with_its_address_after_the_configured_timeout(hung_engine, task):
    import time
    started = time.monotonic()
    result = run_invoke(*task, env={"DOCKER_HOST": hung_engine, "TORCHBAKE_BUILD_ENGINE_TIMEOUT": "2"})
    assert result.returncode == 4, result.stdout + result.stderr
    assert f"The Docker engine at {hung_engine} did not answer `docker " in result.stderr
    assert "` within 2 s ([build] engine_timeout)" in result.stderr
    assert "buildx" not in result.stderr  # the client is not what is wrong
    assert time.monotonic() - started < 30


def test_a_docker_context_that_does_not_exist_is_named():
    result = run_invoke("build", "--release", env={"DOCKER_CONTEXT": "no-such-context"})
    assert result.returncode == 4, result.stdout + result.stderr
    assert "Docker context 'no-such-context' (DOCKER_CONTEXT or the current context) does not exist" in result.stderr
    assert "buildx" not in result.stderr


@pytest.mark.parametrize("task", ["verify", "diff", "show-build", "sbom", "provenance", "stop-container",
                                  "run-container", "build"])
def test_task_help_after_the_task_is_its_help_even_where_it_takes_image(task):
    """`invoke verify --help` printed "`docker image inspect --help` failed": invoke read --help as
    the IMAGE it still waited for. It is the task's help, and nothing runs."""
    shown = run_invoke(task, "--help")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith(f"Usage: invoke {task} ") and "docker" not in shown.stderr
    still = run_invoke("verify")  # without --help, IMAGE is still required
    assert still.returncode == 2 and "did not receive required positional arguments: 'image'" in still.stderr


@pytest.mark.parametrize(("args", "says"), [
    # ubuntu:20.04's own Python is 3.8: the build would refuse it once it read the image
    (["build-base", "-n", "team/base", "-s", "ubuntu:20.04", "-v", "3.10"],
     "Python 3.10 was requested, but the base image ubuntu:20.04 (--sys) is ubuntu 20.04, whose OS Python is 3.8"),
    (["build", "--release", "-b", "ubuntu:22.04", "-v", "3.11"],
     "Python 3.11 was requested, but the base image ubuntu:22.04 (--base-img) is ubuntu 22.04, whose OS Python is 3.10"),
    # the vendor extension's ref where the profile builds none
    (["build", "--torch-musa-tag", "v1"], "--torch-musa-tag names the vendor extension's git ref, and the cpu profile"
                                          " builds no vendor extension ([sources] extension_repo is unset). It is for"
                                          " --config ascend or --config musa"),
])
def test_the_dry_run_refuses_what_the_build_would(args, says):
    result = run_invoke(*args, "--dry-run", "--docker", "/usr/bin/docker")
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_an_error_raised_while_an_interrupt_unwinds_is_the_interrupt():
    """SIGTERM in the middle of importing the docker SDK: naming the SDK's errors in an `except`
    imported it again, half made, and the user got four tracebacks and exit 1, not 143."""
    from invoke import Exit

    from torchbake.tasks.cli import Terminated, reports_errors

    @reports_errors
    def interrupted():
        try:
            raise Terminated()
        except KeyboardInterrupt:
            raise AttributeError("module 'docker' has no attribute 'errors'") from None

    with pytest.raises(Exit) as info:
        interrupted()
    assert info.value.code == 143 and "interrupted (SIGTERM)" in info.value.message

    @reports_errors
    def broken():
        raise AttributeError("a defect of its own")

    with pytest.raises(AttributeError, match="a defect of its own"):  # not taken for an interrupt
        broken()


@pytest.mark.parametrize(("typed", "offered"), [(["verify", "--rel"], "--require"), (["build", "--rel"], "--release"),
                                                (["run-container", "--com"], "--command")])
def test_tab_completion_of_a_partial_flag_offers_the_tasks_flags(typed, offered):
    """The shell's completion parses the partial line itself: a partial flag (or one typed where the
    task waits for its IMAGE) is no error there, the task's flags are offered."""
    result = run_invoke("--complete", "--", "invoke", *typed)
    assert result.returncode == 0 and offered in result.stdout.split(), result.stdout + result.stderr
