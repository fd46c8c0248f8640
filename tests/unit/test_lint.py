"""Static checks of the project's own code, and of what it generates."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT as PROJECT_ROOT
from torchbake.inputs.context import render_dockerfile

TOOLS = Path(sys.executable).parent  # the linters are installed in the test environment (the test extra)


def lint(*argv: str) -> None:
    """Run a linter from the test environment in the repository; any finding fails the test."""
    result = subprocess.run([str(TOOLS / argv[0]), *argv[1:]], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_is_clean():
    """Every Python file of the repository, the in-image scripts of docker/common/ included."""
    lint("ruff", "check", ".")


def test_shellcheck_is_clean():
    """The in-image scripts (sourced helpers followed, -x), the project's own scripts and CI's entry."""
    scripts = sorted(str(p.relative_to(PROJECT_ROOT)) for p in [*PROJECT_ROOT.glob("docker/common/*.sh"),
                                                                 *PROJECT_ROOT.glob("scripts/*.sh")])
    assert "docker/common/trust.sh" in scripts and "scripts/test.sh" in scripts
    lint("shellcheck", "-x", *scripts, ".ci/run")


@pytest.mark.parametrize("template", ["base", "dev", "release"])
def test_hadolint_is_clean_on_the_rendered_dockerfile(template, tmp_path):
    """Each template as torchbake renders it: ENV blocks and companion steps filled in."""
    text = (PROJECT_ROOT / "docker/ubuntu" / f"dockerfile.{template}").read_text()
    rendered = render_dockerfile(text, {"TORCH_CUDA_ARCH_LIST": "8.0;9.0", "MUSA_HOME": "/usr/local/musa"}, "cuda",
                                 runtime_env={"LD_LIBRARY_PATH": "/usr/local/musa/lib"}, companions=["01-numpy", "02-pyyaml"],
                                 steps={"toolkits", "extension"})
    assert "@torchbake-" not in rendered
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(rendered)
    lint("hadolint", "--no-color", str(dockerfile))


def test_the_workflow_passes_zizmor_and_githubs_schema():
    """The nightly workflow users copy: pinned actions, read-only token, secrets through env."""
    lint("zizmor", "--offline", "--no-progress", ".github/workflows/")
    lint("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *sorted(
        str(p.relative_to(PROJECT_ROOT)) for p in PROJECT_ROOT.glob(".github/workflows/*.yml")))


def test_the_linters_find_what_they_should(tmp_path):
    """Each linter as the tests run it reports a known defect (a lint that never fails proves nothing)."""
    cases = {
        "shellcheck": ("bad.sh", "#!/usr/bin/env bash\ncd /tmp\necho $unset_var\n"),
        "hadolint": ("Dockerfile", "FROM debian\nRUN cd /x && apt-get install foo\n"),
        "zizmor": ("wf/.github/workflows/w.yml", "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
                   "    steps:\n      - uses: actions/checkout@v4\n"),
    }
    for tool, (name, text) in cases.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        target = str(tmp_path / "wf/.github/workflows") if tool == "zizmor" else str(path)
        extra = ["--offline", "--no-progress"] if tool == "zizmor" else []
        result = subprocess.run([str(TOOLS / tool), *extra, target], capture_output=True, text=True)
        assert result.returncode != 0, f"{tool} found nothing in {text!r}: {result.stdout}{result.stderr}"


TLS_OFF = re.compile(
    r"shell=True|--no-check-certificate|sslVerify\s*=?\s*false|--trusted-host|GIT_SSL_NO_VERIFY|"
    r"curl\s+(-\w*k|--insecure)|wget\s+.*--no-check|check_hostname\s*=\s*False|CERT_NONE|\bverify\s*=\s*False|"
    r"PYTHONHTTPSVERIFY\s*=\s*0|Verify-Peer\s*\"?false|_create_unverified_context|\s-k\s"
)


def _offenders(folders: tuple[str, ...]) -> list[str]:
    found = []
    for folder in folders:
        for path in (PROJECT_ROOT / folder).rglob("*"):
            if path.is_file() and (path.suffix in (".py", ".sh", ".toml", ".txt", "") or path.name.startswith("dockerfile")):
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if TLS_OFF.search(line):
                        found.append(f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}")
    return found


def test_no_shell_true_and_no_tls_switched_off():
    """No Dockerfile, script, config or generated command (the exact dry-run plans hold the
    docker commands torchbake generates) disables TLS verification."""
    assert _offenders(("torchbake", "docker", "scripts", "configs", "tests/unit/expected")) == []


def test_the_lint_catches_what_it_should():
    for line in ("wget --no-check-certificate URL", "git -c http.sslVerify=false clone", "pip install --trusted-host h x",
                 "GIT_SSL_NO_VERIFY=1 git clone", "curl -fsSLk URL", "curl -k URL", "ctx.check_hostname = False",
                 "requests.get(url, verify=False)", "ssl._create_unverified_context()"):
        assert TLS_OFF.search(line), line


INVOKE_HINT = re.compile(r"`invoke ([a-z][a-z-]*)([^`]*)`")


def _task_flags() -> dict[str, set[str]]:
    sys.path.insert(0, str(PROJECT_ROOT))
    import tasks

    return {name: {("-" if len(n) == 1 else "--") + n.replace("_", "-") for a in copy.deepcopy(tasks.ns[name]).get_arguments() for n in a.names}
            | {"--help"} for name in tasks.ns.task_names}


def test_every_invoke_command_a_message_or_the_readme_suggests_is_accepted():
    """`invoke TASK --flag …` in any message (and in the README, configs and scripts) names a task
    that exists and flags it accepts: hints are commands that work where they are printed."""
    accepted = _task_flags()
    wrong = []
    for path in [*PROJECT_ROOT.glob("torchbake/**/*.py"), PROJECT_ROOT / "README.md", *PROJECT_ROOT.glob("docs/**/*.md"),
                 *PROJECT_ROOT.glob("configs/*.toml")]:
        for task, rest in INVOKE_HINT.findall(path.read_text()):
            if task not in accepted:
                wrong.append(f"{path.name}: invoke {task} (no such task)")
                continue
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest):
                if flag.split("=")[0] not in accepted[task]:
                    wrong.append(f"{path.name}: invoke {task} {flag}")
    assert wrong == []
