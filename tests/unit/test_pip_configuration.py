"""pip's configuration in uv's words: what torchbake's locks resolve against, and what
scripts/setup.sh fills .venv from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchbake.inputs import pip_configuration

ROOT = Path(__file__).resolve().parents[2]

LISTING = """\
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.find-links='/opt/global-wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
install.find-links='/opt/install-wheels'
download.index-url='https://download.example/simple'
global.constraint='/etc/xdg/pip/constraints.txt'
:env:.constraint='/tmp/env-constraints.txt'
"""


def test_each_command_reads_the_environment_then_its_own_section_then_global():
    assert pip_configuration.parse(LISTING, "install") == {
        "extra-index-url": ["file:///opt/a/simple", "file:///opt/b/simple"],
        "find-links": ["/opt/install-wheels"],
        "index-url": [],
        "constraint": ["/tmp/env-constraints.txt"],
    }
    download = pip_configuration.parse(LISTING, "download")
    assert download["find-links"] == ["/opt/global-wheels"] and download["index-url"] == ["https://download.example/simple"]


def test_uv_arguments_choose_as_pip_does_the_given_index_over_pips():
    pip = pip_configuration.parse(LISTING, "download")
    assert pip_configuration.uv_arguments(pip, index_url="https://mine.example/simple",
                                          extra_index_urls=["file:///opt/a/simple", "file:///opt/c/simple"],
                                          find_links=["/wheels"]) == [
        "--index-strategy", "unsafe-best-match", "--index-url", "https://mine.example/simple",
        "--extra-index-url", "file:///opt/a/simple", "--extra-index-url", "file:///opt/b/simple",
        "--extra-index-url", "file:///opt/c/simple",
        "--find-links", "/opt/global-wheels", "--find-links", "/wheels",
        "--constraint", "/tmp/env-constraints.txt"]
    assert pip_configuration.uv_arguments({}) == ["--index-strategy", "unsafe-best-match"]


def test_uv_environment_says_the_same_choice_in_uvs_variables():
    """uv's variables for the choice uv_arguments says: each list with the separator uv splits
    that variable on (find-links at commas, the others at spaces); none for what is not chosen."""
    pip = pip_configuration.parse(LISTING, "download")
    assert pip_configuration.uv_environment(pip, index_url="https://mine.example/simple", find_links=["/wheels"]) == {
        "UV_INDEX_STRATEGY": "unsafe-best-match", "UV_INDEX_URL": "https://mine.example/simple",
        "UV_EXTRA_INDEX_URL": "file:///opt/a/simple file:///opt/b/simple",
        "UV_FIND_LINKS": "/opt/global-wheels,/wheels", "UV_CONSTRAINT": "/tmp/env-constraints.txt"}
    assert pip_configuration.uv_environment({}) == {"UV_INDEX_STRATEGY": "unsafe-best-match"}


def test_a_value_uv_would_split_is_refused_without_saying_it():
    """A find-links location with a comma would be two for uv: refused, and the message names the
    option, not the value, which may hold a password."""
    secret = "https://user:s3cret@host/wheels,old"
    with pytest.raises(ValueError, match="--find-links") as refused:
        pip_configuration.uv_environment({"find-links": [secret]})
    assert "s3cret" not in str(refused.value)


def setup_output(listing: str) -> subprocess.CompletedProcess:
    """``python3 -I -S -m torchbake.inputs.pip_configuration`` from the checkout, as setup.sh runs it
    before .venv holds anything (no site packages, no user ones), fed ``listing``."""
    return subprocess.run([sys.executable, "-I", "-S", "-c",
                           "import sys; sys.path.insert(0, '.'); import runpy; "
                           "runpy.run_module('torchbake.inputs.pip_configuration', run_name='__main__')"],
                          input=listing, capture_output=True, text=True, cwd=ROOT, check=False)


def test_setup_runs_it_with_the_standard_library_alone():
    """It prints install's choice as uv's environment, NAME=VALUE one a line."""
    result = setup_output(LISTING)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "UV_INDEX_STRATEGY=unsafe-best-match", "UV_EXTRA_INDEX_URL=file:///opt/a/simple file:///opt/b/simple",
        "UV_FIND_LINKS=/opt/install-wheels", "UV_CONSTRAINT=/tmp/env-constraints.txt"]
    assert "pip_configuration" in (ROOT / "scripts/setup.sh").read_text()


def test_setup_puts_no_index_and_no_password_on_a_command_line():
    """An index URL may carry a password (``https://user:token@host/simple``); ``ps`` shows every
    process's command line to every user. So the module prints no argument, only uv's variables,
    and setup.sh exports them (a builtin) and runs uv with nothing of them on its command line."""
    listing = ("global.index-url='https://user:t0ken@private.example/simple'\n"
               "install.extra-index-url='https://user:t0ken@extra.example/simple'\n")
    result = setup_output(listing)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("-")]
    assert dict(line.split("=", 1) for line in lines) == {
        "UV_INDEX_STRATEGY": "unsafe-best-match", "UV_INDEX_URL": "https://user:t0ken@private.example/simple",
        "UV_EXTRA_INDEX_URL": "https://user:t0ken@extra.example/simple"}
    setup = (ROOT / "scripts/setup.sh").read_text()
    uv = [line for line in setup.splitlines() if ".venv/bin/uv pip install" in line]
    assert uv and all("$" not in line.partition(".venv/bin/uv")[2] for line in uv), uv
    assert 'export "${uv_environment[@]}"' in setup
