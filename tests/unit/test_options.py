"""The option table (torchbake.configuration.options): each flag declared once, and what comes from it."""

from __future__ import annotations

import pytest

import tasks
from tests.conftest import run_invoke
from torchbake.configuration import options, settings
from torchbake.core.errors import ConfigurationError

TABLES = {name: value for name, value in vars(options).items() if name.endswith("_FLAGS")}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_flag_sets_an_option_that_exists_and_a_switch_says_what_it_sets(table):
    known = settings.schema()
    for flag in TABLES[table]:
        assert not flag.key or flag.key in known, f"{table} --{flag.param}: no option {flag.key}"
        assert flag.default is not options.SWITCH or not flag.key or flag.sets is not None, flag.param
        assert bool(flag.only) == bool(flag.why), flag.param


def test_each_task_takes_exactly_the_flags_of_its_table():
    for table, flags in TABLES.items():
        task = tasks.ns.tasks[table.removesuffix("_FLAGS").lower().replace("_", "-")]
        assert [p for p in task.argspec(task.body).parameters] == [f.param for f in flags]
        assert {a.name: a.help for a in task.get_arguments()} == {f.param: f.help for f in flags}


def test_overrides_are_what_the_given_flags_set():
    given = {"name": "team/torch", "release": True, "no_verify": True, "keep_git": False, "python": None,
             "no_registry_check": True, "dry_run": True, "config": []}
    assert options.overrides(options.BUILD_FLAGS, given) == {
        "image.name": "team/torch", "build.variant": "release", "build.verify": False, "registry.check": False}


def test_a_flag_without_effect_on_the_variant_is_named_with_why():
    with pytest.raises(ConfigurationError, match=r"^--torch-whl-url has no effect on a dev image: a dev image builds"
                                                 r" torch from source\. Leave it out, or build a release image"):
        options.check_effect(options.BUILD_FLAGS, "dev", {"torch_whl_url": "torch==2.13.0"})
    options.check_effect(options.BUILD_FLAGS, "release", {"torch_whl_url": "torch==2.13.0"})


def test_every_flag_an_option_declares_is_taken_by_some_task_with_the_declared_help():
    taken = {flag.key: flag for flags in TABLES.values() for flag in flags if flag.key}
    for key, declared in settings.declarations().items():
        if declared.flag:
            assert key in taken, f"{key} declares --{declared.flag}, which no task takes"
            assert (declared.flag_help or declared.help) in taken[key].help, key
            assert taken[key].help.endswith(f"[{key.split('.')[0]}] {key.split('.')[1]}"), key


def test_a_bool_options_switch_sets_the_other_value_and_a_legacy_name_keeps_the_own_one():
    assert options.option_flag("build.verify").sets is False and options.option_flag("sources.keep_git").sets is True
    assert options.option_flag("build.variant").sets == "release"
    extension = options.option_flag("wheels.extension")  # configs/accelerators.toml: musa's flag_names
    assert (extension.spelling, extension.aliases) == ("--torch-musa-whl-url", ("torch_musa_whl_url", "extension-whl-url"))
    with pytest.raises(ValueError, match="declares no flag"):
        options.option_flag("python.uv")


def test_the_generic_name_of_a_renamed_flag_sets_the_same_option():
    for flag in ("--extension-whl-url", "--torch-musa-whl-url"):
        result = run_invoke("build", "--release", flag, "https://vendor.invalid/ext-1.0-py3-none-any.whl", "--dry-run",
                            "--docker", "/usr/bin/docker")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "extension       https://vendor.invalid/ext-1.0-py3-none-any.whl" in result.stdout, flag


def test_a_number_options_flag_gives_the_option_its_type():
    """invoke gives a flag's value as text: a number option's flag set "3", which the configuration
    refused as the wrong type (a team adding such a flag had to convert it in its task)."""
    from torchbake.configuration.options import option_flag, overrides

    keep = option_flag("gc.keep")
    assert overrides((keep,), {"keep": "3"}) == {"gc.keep": 3}
    with pytest.raises(ConfigurationError, match=r"--keep 'x': expected a whole number \(gc\.keep\)\."):
        overrides((keep,), {"keep": "x"})
    for typed in ("1_0", "0x10", " 3x", "nan"):  # Python's literals are not numbers a user types
        with pytest.raises(ConfigurationError, match=r"expected a whole number \(gc\.keep\)"):
            overrides((keep,), {"keep": typed})
    toolkit = next(flag for flag in options.BUILD_FLAGS if flag.key.startswith("toolkits."))  # text, as given
    assert overrides((toolkit,), {toolkit.param: "https://h.invalid/k.tar.gz"}) == {
        toolkit.key: "https://h.invalid/k.tar.gz"}
