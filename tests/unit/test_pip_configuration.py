"""pip's configuration in uv's words: what torchbake's locks resolve against, and what
scripts/setup.sh fills .venv from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_setup_runs_it_with_the_standard_library_alone():
    """scripts/setup.sh runs it before .venv holds anything: `python3 -I` (no site packages, no
    user ones) from the checkout, as setup.sh does, prints install's arguments one a line."""
    result = subprocess.run([sys.executable, "-I", "-S", "-c",
                             "import sys; sys.path.insert(0, '.'); import runpy; "
                             "runpy.run_module('torchbake.inputs.pip_configuration', run_name='__main__')"],
                            input=LISTING, capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "--index-strategy", "unsafe-best-match", "--extra-index-url", "file:///opt/a/simple",
        "--extra-index-url", "file:///opt/b/simple", "--find-links", "/opt/install-wheels",
        "--constraint", "/tmp/env-constraints.txt"]
    assert "pip_configuration" in (ROOT / "scripts/setup.sh").read_text()
