"""Every option, its environment variable and every flag given a value of the wrong kind: a clear
error naming it, exit 2, before any work. Generated from the declarations (torchbake.configuration.settings,
torchbake.configuration.options), not a hand list: an option or flag added later is swept too."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tasks
from tests.conftest import ROOT, run_invoke
from torchbake.configuration import settings
from torchbake.core.errors import ConfigurationError
from torchbake.planning import config


def _wrong_values(default: object) -> list[object]:
    """Values of the wrong kind for an option whose default is ``default``."""
    if isinstance(default, bool):
        return ["maybe"]
    if isinstance(default, int):
        return [10**30, "three", 2.5]
    if isinstance(default, float):
        return [float("nan"), float("inf"), -1.0, "soon"]
    if isinstance(default, str):
        return ["   ", "one\ntwo", "tab\there", "nul\0"]
    if isinstance(default, list):
        return [["  "], ["one\ntwo"], "not-a-list"]
    if isinstance(default, dict):
        return [{"  ": "x"}, "not-a-table"]
    return []


OPTIONS = [(key, bad) for key, declared in settings.declarations().items() for bad in _wrong_values(declared.default)]


@pytest.mark.parametrize(("key", "bad"), OPTIONS, ids=[f"{k}={v!r}" for k, v in OPTIONS])
def test_every_option_refuses_a_value_of_the_wrong_kind_naming_the_key(key, bad, tmp_path):
    with pytest.raises(ConfigurationError) as refused:
        config.resolve([], {"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path)}, {key: bad})
    assert key in str(refused.value) or key.rsplit(".", 1)[-1] in str(refused.value)
    assert ConfigurationError.exit_code == 2


def test_an_input_wheel_that_is_another_packages_is_refused_naming_what_it_installs():
    for key, bad in (("wheels.torch", "numpy==2.4.6"), ("wheels.torch", "https://h.invalid/numpy-2.4.6-cp311-cp311-"
                                                                        "manylinux_2_28_x86_64.whl"),
                     ("wheels.torchvision", "torch==2.13.0"), ("wheels.torch", "/"), ("wheels.index_url", "/tmp")):
        with pytest.raises(ConfigurationError, match=key.replace(".", r"\.")):
            config.resolve([], {}, {key: bad})


@pytest.mark.parametrize(("url", "says"), [
    ("https://user:url-pass-6@exa mple.invalid/torch-2.3.0-cp311-cp311-linux_x86_64.whl", "white space in its host"),
    ("https://h.invalid:99999/torch-2.3.0-cp311-cp311-linux_x86_64.whl", "the URL's port is not a number from 1 to 65535"),
    ("https://h.invalid:http/torch-2.3.0-cp311-cp311-linux_x86_64.whl", "the URL's port is not a number from 1 to 65535"),
])
def test_a_wheels_url_whose_host_or_port_no_client_can_reach_is_refused(url, says):
    """Refused where the option is read (exit 2, before any download), its password masked."""
    with pytest.raises(ConfigurationError) as refused:
        config.resolve([], {}, {"wheels.torch": url})
    assert says in str(refused.value) and "wheels.torch" in str(refused.value)
    shown = run_invoke("build", "--release", "--dry-run", "--torch-whl-url", url)
    assert shown.returncode == 2 and says in shown.stderr, shown.stdout + shown.stderr
    assert "url-pass-6" not in shown.stdout + shown.stderr


def test_a_dockerfile_given_as_a_url_is_refused_as_one():
    """The template is read from disk: a URL is said to be one, not looked for as the path https:/…"""
    shown = run_invoke("build", "--release", "--dry-run", "--docker-file", "https://u:df-pass-7@h.example/Dockerfile")
    assert shown.returncode == 2 and "a URL is not fetched for this option" in shown.stderr, shown.stderr
    assert "df-pass-7" not in shown.stdout + shown.stderr


# The tasks swept on the command line: those that plan (or print) without building, so that a value
# wrongly accepted does no work here; the flag's value is the first of the option's wrong values.
SAFE = {"build": ["--dry-run"], "build-base": ["--dry-run"], "build-all": ["--plan"], "gc": ["--dry-run"],
        "bootstrap-os": ["--dry-run"], "show-config": []}


def _flag_cases() -> list[tuple[str, str, str]]:
    cases = []
    for name in SAFE:
        task = tasks.ns.tasks[name]
        for argument in task.get_arguments():
            if argument.kind is bool or not argument.takes_value:
                continue
            flag = "--" + argument.name.replace("_", "-")
            cases.append((name, flag, "one\ntwo" if argument.kind is not int else "3.5"))
    return cases


FLAGS = _flag_cases()
DRIVER = """
import contextlib, io, json, sys
from invoke import Program
from torchbake.tasks import ns
results = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            Program(namespace=ns).run(["invoke", *argv], exit=True)
            code = 0
        except SystemExit as exc:
            code = exc.code
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def flag_results(tmp_path_factory) -> dict[tuple[str, str], tuple[int, str]]:
    """Every case run by one process (invoke's Program per command line, as the command runs it)."""
    argvs = [[name, flag, value, *SAFE[name]] for name, flag, value in FLAGS]
    env = {"PATH": "/usr/bin:/bin", "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
           "TORCHBAKE_PATHS_LOG_DIR": str(tmp_path_factory.mktemp("logs")), "HOME": str(tmp_path_factory.mktemp("home"))}
    done = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(argvs), cwd=tmp_path_factory.mktemp("cwd"),
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    return {(name, flag): (code, err) for (name, flag, _value), (code, err) in zip(FLAGS, results, strict=True)}


@pytest.mark.parametrize(("task", "flag", "value"), FLAGS, ids=[f"{t} {f}" for t, f, _ in FLAGS])
def test_every_flag_refuses_a_value_of_the_wrong_kind_with_exit_2_naming_it(task, flag, value, flag_results):
    code, err = flag_results[(task, flag)]
    assert code == 2, err
    assert err.startswith("torchbake: error: ") and "Traceback" not in err, err
    assert flag in err or _option_of(task, flag) in err, err


def _option_of(task: str, flag: str) -> str:
    """The configuration key a task's flag sets (the flag itself when the task reads it)."""
    from torchbake.configuration import options

    every = [f for name in dir(options) if name.endswith("_FLAGS") for f in getattr(options, name)]
    return next((f.key for f in every if f.spelling == flag and f.key), flag)


def test_a_flag_given_no_value_is_refused_naming_it():
    for argv in (["build", "--config"], ["build", "--config", "--dry-run"], ["build-all", "--plan", "--report"]):
        done = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(ROOT), *argv], cwd=ROOT,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"{argv[-1] if argv[-1] != '--dry-run' else '--config'} needs a value." in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["253402300800", "99999999999999999999999", "-1", "1e9", "١٢٣"])
def test_source_date_epoch_out_of_range_is_a_clear_error(value):
    from torchbake.core.build_time import source_date_epoch

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SOURCE_DATE_EPOCH", value)
        with pytest.raises(ConfigurationError, match="SOURCE_DATE_EPOCH"):
            source_date_epoch()


def _wrong_text(default: object) -> str:
    """A value of the wrong kind for an option's environment variable (its text)."""
    if isinstance(default, bool):
        return "maybe"
    if isinstance(default, int | float):
        return "three"
    return "one\ttwo"


ENVIRONMENT = [(settings.env_var_name(key), _wrong_text(declared.default), key)
               for key, declared in settings.declarations().items() if not isinstance(declared.default, dict)]


@pytest.mark.parametrize(("variable", "bad", "key"), ENVIRONMENT, ids=[v for v, _, _ in ENVIRONMENT])
def test_every_options_environment_variable_refuses_a_value_of_the_wrong_kind(variable, bad, key):
    with pytest.raises(ConfigurationError) as refused:
        config.resolve([], {variable: bad}, {})
    assert variable in str(refused.value) or key in str(refused.value), str(refused.value)
