"""The configuration cascade: defaults < --config files < environment < command line."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from tests.conftest import run_invoke
from torchbake.configuration import accelerators, settings
from torchbake.core.errors import ConfigurationError
from torchbake.planning import config


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_schema_is_the_declared_options_and_the_accelerators_toolkits():
    keys = set(settings.schema())
    fields = {
        f"{section}.{f.name}"
        for section, cls in settings.SECTION_TYPES.items()
        for f in dataclasses.fields(cls)
    }
    toolkits = {f"toolkits.{t.key}" for a in accelerators.bundled().values() for t in a.toolkits}
    assert toolkits == {"toolkits.musa_toolkits_url", "toolkits.mudnn_url", "toolkits.mccl_url", "toolkits.cann_toolkit_url"}
    assert keys == fields | toolkits
    assert list(settings.SECTION_TYPES)[:3] == ["image", "naming", "python"]  # Settings' fields, in order


def test_every_option_declares_its_help_and_every_section_says_what_it_is_for():
    for key, declared in settings.declarations().items():
        assert declared.help and not declared.help.endswith("."), key  # the flag's help adds ". [section] key"
        assert bool(declared.only) == bool(declared.why), key
        assert not declared.only or declared.flag, key  # "without effect" is a flag's error
    assert all(settings.section_help(section) for section in settings.SECTION_TYPES)


def test_the_schema_is_a_fresh_copy_each_time():
    first = settings.schema()
    first["wheels.extra"].append("changed")
    first["dev.build_env"]["X"] = "1"
    assert settings.schema()["wheels.extra"] == ["numpy"] and settings.schema()["dev.build_env"] == {"BUILD_TEST": "0"}


def test_layers_in_order_and_sources_recorded(tmp_path):
    first = write(tmp_path, "a.toml", '[image]\nname = "a/one"\ntag = "t1"\n[python]\nversion = "3.10"\n')
    second = write(tmp_path, "b.toml", '[image]\ntag = "t2"\n')
    resolved = config.resolve(
        [first, second],
        {"TORCHBAKE_PYTHON_VERSION": "3.12", "TORCHBAKE_IMAGE_TAG": "from-env"},
        {"image.tag": "from-cli", "image.base": None},
    )
    assert resolved.values["image.name"] == "a/one"
    assert resolved.sources["image.name"] == str(first)
    assert resolved.values["python.version"] == "3.12"
    assert resolved.sources["python.version"] == "environment TORCHBAKE_PYTHON_VERSION"
    assert resolved.values["image.tag"] == "from-cli"
    assert resolved.sources["image.tag"] == "command line"
    assert resolved.values["image.base"] == "torchbake/pytorch-cpu:base-py3.12"  # None means "not given": derived
    assert resolved.sources["image.base"].startswith("derived from [naming]")


def test_later_config_file_wins(tmp_path):
    a = write(tmp_path, "a.toml", '[image]\ntag = "a"\n')
    b = write(tmp_path, "b.toml", '[image]\ntag = "b"\n')
    assert config.resolve([a, b], {}).values["image.tag"] == "b"
    assert config.resolve([b, a], {}).values["image.tag"] == "a"


def test_environment_values_are_typed(tmp_path):
    resolved = config.resolve([], {
        "TORCHBAKE_BUILD_VERIFY": "no",
        "TORCHBAKE_IMAGE_RENDER_GID": "109",
        "TORCHBAKE_WHEELS_EXTRA": "numpy, pillow",
        "TORCHBAKE_IMAGE_ENV": "A=1,B=two",
    })
    settings = resolved.settings()
    assert settings.build.verify is False
    assert settings.image.render_gid == 109
    assert settings.wheels.extra == ("numpy", "pillow")
    assert dict(settings.image.env) == {"A": "1", "B": "two"}


def test_legacy_docker_build_dir_is_read_below_torchbake_variable(tmp_path):
    resolved = config.resolve([], {"DOCKER_BUILD_DIR": "/tmp/legacy"})
    assert resolved.values["build.dir"] == "/tmp/legacy"
    assert resolved.sources["build.dir"] == "environment DOCKER_BUILD_DIR"
    resolved = config.resolve([], {"DOCKER_BUILD_DIR": "/tmp/legacy", "TORCHBAKE_BUILD_DIR": "/tmp/new"})
    assert resolved.values["build.dir"] == "/tmp/new"


def test_tables_merge_across_files(tmp_path):
    a = write(tmp_path, "a.toml", '[image]\nenv = { A = "1", B = "2" }\n')
    b = write(tmp_path, "b.toml", '[image]\nenv = { B = "3" }\n')
    assert config.resolve([a, b], {}).values["image.env"] == {"A": "1", "B": "3"}


def test_settings_are_frozen():
    settings = config.resolve([], {}).settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.image.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[imgae]\nname = "x"\n', "unknown section [imgae]. Did you mean 'image'?"),
        ('[image]\nnmae = "x"\n', "unknown option 'image.nmae'. Did you mean 'name'?"),
        ('[python]\nverison = "3.10"\n', "unknown option 'python.verison'. Did you mean 'version'?"),
        # each value as TOML writes it (a TOML true is not Python's True)
        ('[image]\nrender_gid = "109"\n', 'image.render_gid = "109" has the wrong type; expected an integer.'),
        ('[build]\nverify = "yes"\n', 'build.verify = "yes" has the wrong type; expected true or false.'),
        ('[wheels]\nextra = "numpy"\n', 'wheels.extra = "numpy" has the wrong type; expected a list of strings.'),
        ("[gc]\nkeep = true\n", "gc.keep = true has the wrong type; expected an integer."),
        ("[python.version]\nx = 1\n", "python.version = {x = 1} has the wrong type; expected a string."),
        ("image = 3\n", "image = 3 must be a table ([image]), not a value."),
        ("[image\n", "is not valid TOML"),
    ],
)
def test_bad_config_files(tmp_path, toml, message):
    path = write(tmp_path, "bad.toml", toml)
    with pytest.raises(ConfigurationError) as info:
        config.resolve([path], {})
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_config_file_lists_the_shipped_profiles(tmp_path):
    with pytest.raises(ConfigurationError) as info:
        config.resolve([tmp_path / "nope.toml"], {})
    assert "does not exist" in str(info.value)
    assert ("named by name (--config cuda): ascend (a profile), cpu (a profile), cuda (a profile), musa (a profile),"
            " nightly (a build-all matrix), rocm (a profile), tpu (a profile), xpu (a profile)") in str(info.value)  # accelerators.toml is no profile to name


def test_a_shipped_profile_is_named_by_name_and_a_name_it_does_not_ship_lists_those_it_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the checkout: configs/cuda.toml is no path here
    cuda = config.resolve(["cuda"], {}).settings()
    assert cuda.accelerator.torch_cuda_arch_list == "7.5;8.0;8.6;8.9;9.0"  # the profile's values, not only its name
    with pytest.raises(ConfigurationError) as info:
        config.resolve(["cudaa"], {})
    assert str(info.value) == ("--config 'cudaa' is neither a file nor a config torchbake ships. Name a file"
                               " (path/to/file.toml) or one of: ascend (a profile), cpu (a profile), cuda (a profile),"
                               " musa (a profile), nightly (a build-all matrix), rocm (a profile), tpu (a profile),"
                               " xpu (a profile).")
    (tmp_path / "cuda").write_text('[python]\nversion = "3.12"\n')  # a file of that name here is that file
    assert config.resolve(["cuda"], {}).settings().python.version == "3.12"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TORCHBAKE_PYTHON_VERISON": "3.10"}, "Unknown environment variable TORCHBAKE_PYTHON_VERISON. Did you mean 'TORCHBAKE_PYTHON_VERSION'?"),
        ({"TORCHBAKE_BUILD_VERIFY": "maybe"}, "TORCHBAKE_BUILD_VERIFY='maybe': expected true/false"),
        ({"TORCHBAKE_IMAGE_RENDER_GID": "abc"}, "TORCHBAKE_IMAGE_RENDER_GID='abc': expected an integer."),
        ({"TORCHBAKE_IMAGE_RENDER_GID": "1_0"}, "TORCHBAKE_IMAGE_RENDER_GID='1_0': expected an integer."),
        ({"TORCHBAKE_DOWNLOADS_RETRY_BACKOFF": "nan"}, "TORCHBAKE_DOWNLOADS_RETRY_BACKOFF='nan': expected a number."),
        ({"TORCHBAKE_IMAGE_ENV": "A"}, "expected KEY=VALUE pairs"),
    ],
)
def test_bad_environment(env, message):
    with pytest.raises(ConfigurationError) as info:
        config.resolve([], env)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("python.version", "3", "expected a Python version as X.Y, one of 3.8, 3.9"),
        ("python.version", "2.7", "supported Python versions are 3.8, 3.9, 3.10, 3.11, 3.12, 3.13, 3.14"),
        ("python.version", "3.10.4", "expected a Python version as X.Y"),
        ("image.name", "Torch/Image", "expected an image name such as 'torchbake/pytorch-cpu'"),
        ("image.name", "bad name", "expected an image name"),
        ("image.tag", "-latest", "expected a tag of up to 128 characters"),
        ("image.tag", "a" * 129, "expected a tag of up to 128 characters"),
        ("image.base", "ubuntu:20.04@sha256:abc", "expected a digest as sha256:<64 hex digits>"),
        ("image.base", "UBUNTU:20.04", "expected an image name"),
        ("wheels.torch", "ftp://example.invalid/torch.whl", "expected an http://, https:// or file:// URL or a local path"),
        ("wheels.torch", "/no/such/torch.whl", "no such file"),
        ("wheels.torch", "torch = = 2", "expected a wheel URL (http(s):// or file://), a local wheel path, or a pip requirement"),
        ("wheels.torch", "https://host.invalid/t.whl#md5=abc", "the only URL fragment understood is '#sha256=<64 hex digits>'"),
        ("wheels.torch", "https://host.invalid/t.whl#sha256=1234", "expected a sha256 digest: 64 lowercase hex digits"),
        ("toolkits.musa_toolkits_url", "musa.tar.gz", "no such file"),
        ("accelerator.profile", "ipu", "expected one of: cpu, cuda, rocm, musa, ascend, tpu, xpu"),
        ("accelerator.torch_cuda_arch_list", "8.0;sm_90", "expected compute capabilities separated by ';'"),
        ("accelerator.pytorch_rocm_arch", "mi300", "expected gfx targets"),
        ("build.variant", "nightly", "expected one of: dev, release"),
        ("python.provider", "conda", "expected one of: os, standalone"),
        ("image.render_gid", 70000, "expected a group id from 0 (none) to 65535"),
        ("image.env", {"1BAD": "x"}, "'1BAD' is not a valid environment variable name"),
        ("dev.extensions", ["git+https://github.com/NVIDIA/apex.git"], "expected git+URL@REF"),
        ("dev.extensions", ["git+ftp://h/apex.git@v1"], "expected a git URL"),
        ("dev.max_jobs", 5000, "expected a number of jobs from 1 to 1024, or 0 for automatic"),
        ("dev.ccache_size", "lots", "expected a size such as 500M or 20G"),
        ("dev.runtime_paths", ["usr/local/musa"], "expected absolute paths inside the image"),
        ("sources.pytorch_repo", "https://user:tok@github.com/pytorch/pytorch.git", "without credentials in it"),
        ("sources.pytorch_tag", "v2..0", "expected a git tag or branch name"),
        ("sources.root", "/no/such/folder", "no such folder"),
        ("base.user", "Root User", "expected a Linux user name"),
        ("build.network", "bridge0", "expected one of: default, host, none (or \"\" for Docker's default)"),
    ],
)
def test_invalid_values_name_key_value_and_what_is_accepted(key, value, message):
    with pytest.raises(ConfigurationError) as info:
        config.resolve([], {}, {key: value})
    text = str(info.value)
    assert text.startswith(f"{key} = {value!r} (from command line) is invalid: ")
    assert message in text


def test_bad_checksum_in_config(tmp_path):
    path = write(tmp_path, "c.toml", '[checksums]\n"torch.whl" = "deadbeef"\n')
    with pytest.raises(ConfigurationError, match="checksums.torch.whl = 'deadbeef'.*64 lowercase hex digits"):
        config.resolve([path], {})


def test_valid_inputs_are_accepted(tmp_path):
    wheel = tmp_path / "torch-2.0.0-cp38-cp38-linux_x86_64.whl"
    wheel.write_bytes(b"")
    remote = "https://h.invalid/torch-2.13.0-cp311-cp311-linux_x86_64.whl"
    for value in ("torch==2.13.0", "torch>=2,<3", str(wheel), remote, "file:///torch-2.13.0-cp311-cp311-linux_x86_64.whl",
                  remote + "#sha256=" + "a" * 64, remote + "?X-Amz-Signature=abc&X-Amz-Expires=60"):
        config.resolve([], {}, {"wheels.torch": value})
    for base in ("ubuntu:20.04", "localhost:5000/team/img:tag", "torchbake/debian:bookworm",
                 "img@sha256:" + "0" * 64):
        config.resolve([], {}, {"image.base": base})


def test_shipped_profiles_load(tmp_path):
    for profile in sorted(config.CONFIG_DIR.glob("*.toml")):
        config.resolve([profile], {}, matrix_ok=profile.name == "nightly.toml").settings()


def test_a_matrix_table_outside_build_all_is_an_error():
    with pytest.raises(ConfigurationError, match=r"nightly.toml has a \[matrix\] table, which only build-all reads: run"
                                                 r" `invoke build-all --config .*nightly.toml`"):
        config.resolve([config.CONFIG_DIR / "nightly.toml"], {})


def test_a_byte_order_mark_is_harmless(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf[python]\nversion = \"3.10\"\n")
    assert config.resolve([path], {}).settings().python.version == "3.10"


@pytest.mark.parametrize("files", [(), ("musa.toml",), ("cpu.toml",)])
def test_show_config_toml_reads_back_to_the_same_settings(tmp_path, files):
    resolved = config.resolve([config.CONFIG_DIR / f for f in files], {"TORCHBAKE_WHEELS_EXTRA": "numpy,pillow"},
                              {"python.version": "3.10"})
    written = tmp_path / "resolved.toml"
    written.write_text(config.to_toml(resolved.values))
    again = config.resolve([written], {})
    assert again.settings() == resolved.settings()
    assert config.to_toml(again.values) == config.to_toml(resolved.values)


@pytest.mark.parametrize("variant", ["base", "dev", "release"])
def test_show_config_toml_of_a_variant_plans_that_variant_read_back(tmp_path, variant, clean_env):
    """`show-config --variant V --format toml > f.toml`, then a build with --config f.toml: the same
    settings as the build of V the file was shown for (a release file never plans a dev image)."""
    shown = run_invoke("show-config", "--variant", variant, "--format", "toml")
    assert shown.returncode == 0, shown.stderr
    written = tmp_path / "shown.toml"
    written.write_text(shown.stdout)
    as_built = "base" if variant == "base" else None  # build reads the variant from the file; build-base is base
    again = config.resolve([written], {}, variant=as_built).settings()
    direct = config.resolve([], {}, {"build.variant": None if variant == "base" else variant}, variant=variant).settings()
    assert again == direct
    if variant != "base":
        assert again.build.variant == variant


@pytest.mark.parametrize(("remote", "masked"), [
    ("redis://:ccache-pass-2@cache.example:6379", "redis://:***@cache.example:6379"),
    # ccache's own attribute syntax: a bearer token after the URL
    ("http://cache.example/c|bearer-token=ccache-pass-2|connect-timeout=500",
     "http://cache.example/c|bearer-token=***|connect-timeout=500"),
    ("http://cache.example/c|header=Authorization=Bearer%20ccache-pass-2", "http://cache.example/c|header=Authorization=***"),
])
def test_show_config_masks_the_secret_part_of_every_value(tmp_path, clean_env, remote, masked):
    profile = tmp_path / "secret.toml"
    profile.write_text('[wheels]\nextension = "https://builder:wheel-pass-1@files.example/ext-1.0-py3-none-any.whl"\n'
                       f'[dev]\ncompile_cache = "{remote}"\n')
    for fmt in ("table", "toml"):
        shown = run_invoke("show-config", "--config", str(profile), "--format", fmt, "--variant", "dev")
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout + shown.stderr
        assert "wheel-pass-1" not in text and "ccache-pass-2" not in text
        assert "https://builder:***@files.example/ext-1.0-py3-none-any.whl" in text
        assert (masked if fmt == "toml" else masked[:40]) in text  # (the table wraps long values)


def test_a_refused_compile_cache_url_is_named_without_its_token(clean_env):
    """The storage helpers' `` @bearer-token=`` syntax, refused by the validation (exit 2): its
    message names the value with the token masked."""
    shown = run_invoke("show-config", "--variant", "dev",
                       env={"TORCHBAKE_DEV_COMPILE_CACHE": "https://cache.example/ccache @bearer-token=ccache-pass-3"})
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "ccache-pass-3" not in shown.stdout + shown.stderr and "@bearer-token=***" in shown.stderr, shown.stderr


def test_the_documented_toml_holds_every_value_exactly_under_its_help():
    values = {**config.resolve([], {}).values, "image.env": {"A": 'quote " and \\ and é\nnewline'},
              "wheels.extra": ["numpy", "pillow>=1"], "downloads.retry_backoff": 2.5,
              "checksums.https://h.invalid/a b.whl": "0" * 64}
    text = config.to_toml(values, documented=True)
    assert tomllib.loads(text) == tomllib.loads(config.to_toml(values))
    assert "# Python version of the image, X.Y. As build.sh and build_base.sh -v/--python_version\nversion = " in text
    assert "[image]\n# The image a build makes.\n" in text


STEERING = "\x1b[2J\x1b]0;title\x07\x9b31m\r\x7f\u202e"  # clear screen, set the title, C1 CSI, CR, DEL, RLO
SHOWN = "\\x1b[2J\\x1b]0;title\\x07\\x9b31m\\x0d\\x7f\\u202e"


def test_terminal_escape_sequences_in_a_config_print_as_text_in_its_error(tmp_path):
    """A config's text holding escape sequences: the error names it as text, the terminal is not
    steered by it (they were printed raw: a screen cleared, a window retitled)."""
    bad = write(tmp_path, "steer.toml", '["\\u001b[2J\\u001b]0;title\\u0007"]\nx = 1\n')
    result = run_invoke("show-config", "--config", str(bad))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown section [\\x1b[2J\\x1b]0;title\\x07]" in result.stderr, result.stderr
    assert not any(c in result.stdout + result.stderr for c in "\x1b\x07"), result.stderr


def test_every_error_message_note_and_table_cell_prints_control_characters_as_escapes(capsys, monkeypatch):
    import io

    from torchbake.core import output
    from torchbake.core.errors import SignatureError

    kept = "é 中文\tand\na newline"
    assert str(ConfigurationError(f"value {STEERING} {kept}")) == f"value {SHOWN} {kept}"
    assert str(SignatureError(STEERING)) == SHOWN and ConfigurationError(STEERING).args == (STEERING,)
    for name in output._COLOUR_FORCED:
        monkeypatch.delenv(name, raising=False)
    output.channel().say("note ", (STEERING, "bold"))  # no terminal: written without rich
    assert capsys.readouterr().out == f"note {SHOWN}\n"
    written = io.StringIO()
    channel = output.Channel(output.console(file=written))
    channel.say(("note ", "bold"), STEERING)
    shown = output.table(title=f"of {STEERING}")
    shown.add_column("cell")
    shown.add_row(STEERING)
    channel.show(shown)
    assert f"note {SHOWN}\n" in written.getvalue() and f"of {SHOWN}" in written.getvalue()
    assert f"│ {SHOWN} │" in written.getvalue(), written.getvalue()
    assert not any(c in written.getvalue() for c in "\x1b\x07\x9b\r\x7f\u202e"), written.getvalue()


@pytest.mark.parametrize("password", ["p@ssw0rd-9", 'p"ssw0rd-9', "p'ss@w0rd-9"])
def test_a_password_holding_at_or_a_quote_is_masked_whole(clean_env, password):
    """pip and urllib take https://user:p@ss@host as the password p@ss: masked to the last "@"."""
    shown = run_invoke("show-config", "--format", "toml",
                       env={"TORCHBAKE_WHEELS_INDEX_URL": f"https://alice:{password}@idx.example/simple"})
    assert shown.returncode == 0, shown.stderr
    assert "ssw0rd-9" not in shown.stdout + shown.stderr and "w0rd-9" not in shown.stdout
    assert "https://alice:***@idx.example/simple" in shown.stdout


@pytest.mark.parametrize("args", [
    ["show-config", "--config", "https://user:conf-pass-4@files.example/team.toml"],
    ["build", "--release", "--dry-run", "--config", "https://user:conf-pass-4@files.example/team.toml"],
    ["build-all", "--plan", "--config", "https://user:conf-pass-4@files.example/nightly.toml"],
])
def test_a_config_given_as_a_url_is_refused_without_its_password(clean_env, args):
    """--config takes a file or a bundled config's name: a URL is said to be one (not read as a path,
    whose // became / and hid it from the masking), exit 2, its password in no output."""
    shown = run_invoke(*args)
    assert shown.returncode == 2, shown.stdout + shown.stderr
    assert "conf-pass-4" not in shown.stdout + shown.stderr
    assert ("--config 'https://user:***@files.example/" in shown.stderr
            and "is a URL: --config takes a file (path/to/file.toml) or the name of a config torchbake ships" in shown.stderr)


@pytest.mark.parametrize("args", [
    ["build", "--release", "--dry-run", "--registry", "user:reg-pass-5@registry.example.invalid/team"],
    ["build", "--release", "--dry-run", "--base-img", "user:reg-pass-5@registry.example.invalid/os:1"],
    ["build-all", "--plan", "--registry", "user:reg-pass-5@registry.example.invalid/team"],
])
def test_credentials_written_without_a_scheme_are_masked_too(clean_env, args):
    """``user:password@host`` with no scheme (a registry, an image reference) is as secret as with one:
    whatever torchbake says of the value, the password is ***."""
    shown = run_invoke(*args)
    assert "reg-pass-5" not in shown.stdout + shown.stderr
    assert "user:***@registry.example.invalid" in shown.stdout + shown.stderr, shown.stdout + shown.stderr


def test_an_address_in_a_value_is_no_password_and_masks_no_word(tmp_path, clean_env):
    """An SBOM supplier written ``Team <mailto:build@acme.example>`` looks like user:password@host
    to a pattern run over any text: nothing of it is taken for a secret ("build" stays "build")."""
    from torchbake.core.redaction import redact

    profile = tmp_path / "supplier.toml"
    profile.write_text('[sbom]\nsupplier = "Build Team <mailto:build@acme.example>"\n')
    shown = run_invoke("show-config", "--config", str(profile), "--format", "toml")
    assert shown.returncode == 0, shown.stderr
    assert "***" not in shown.stdout and "[build]" in shown.stdout
    for text in ("mailto:john.doe@example.com", "12:30:45@node1", "cpe:2.3:a:gnu:glibc:2.36@x", "name:tag@SHA256:aa"):
        assert redact(text) == text


def test_variables_named_as_credentials_are_masked_in_the_configuration_and_the_commands_shown(tmp_path, clean_env):
    """HF_TOKEN=… in [run] env (or an --env of run-container) is shown as ***, in show-config's
    formats and in the docker command torchbake prints; a switch's value (API_KEY=true) and other
    variables (MODE=fast) are shown as they are."""
    from torchbake.core.redaction import redact
    from torchbake.running.containers import parse_env

    profile = tmp_path / "env.toml"
    profile.write_text('[run]\nenv = { API_PASSWORD = "runpw-SECRET-1", MODE = "fast" }\n'
                       '[image]\nenv = { HF_TOKEN = "hf_SECRET_2", DEBUG = "true" }\n')
    for fmt in ("table", "toml"):
        shown = run_invoke("show-config", "--config", str(profile), "--format", fmt)
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout + shown.stderr
        assert "runpw-SECRET-1" not in text and "hf_SECRET_2" not in text, text
        assert 'API_PASSWORD = "***"' in text and 'HF_TOKEN = "***"' in text and 'MODE = "fast"' in text
    assert parse_env(["AWS_SECRET_ACCESS_KEY=aws-SECRET-3", "API_KEY=true", "CUDA_VISIBLE_DEVICES=0,1"]) == {
        "AWS_SECRET_ACCESS_KEY": "aws-SECRET-3", "API_KEY": "true", "CUDA_VISIBLE_DEVICES": "0,1"}  # the container's
    assert redact("docker run --env AWS_SECRET_ACCESS_KEY=aws-SECRET-3 --env API_KEY=true --env X=0,1") == (
        "docker run --env AWS_SECRET_ACCESS_KEY=*** --env API_KEY=true --env X=0,1")


def test_a_hint_naming_a_path_with_a_space_quotes_it(tmp_path):
    """A hint is typed as printed: a config file or a report folder whose path holds a space is
    quoted in it (`--config /tmp/d ir/n.toml` would be two words)."""
    import shlex

    from torchbake.configuration.writable import check_output_file

    folder = tmp_path / "d ir"
    folder.mkdir()
    with pytest.raises(ConfigurationError) as info:
        check_output_file(str(folder), "--report")
    assert shlex.split(str(info.value).split("e.g. ", 1)[1].removesuffix(".")) == ["--report", str(folder / "report")]
    matrix = folder / "n.toml"
    matrix.write_text('[matrix]\nprofiles = ["cpu"]\n')
    with pytest.raises(ConfigurationError) as info:
        config.resolve([str(matrix)])
    assert shlex.split(str(info.value).split("`")[1]) == ["invoke", "build-all", "--config", str(matrix)]
