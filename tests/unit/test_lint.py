"""Static checks of the project's own code, and of what it generates."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

from torchbake.config import PROJECT_ROOT


def test_ruff_is_clean():
    """Every Python file of the repository, the in-image scripts of docker/common/ included."""
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."],
                            cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


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
    for path in [*PROJECT_ROOT.glob("torchbake/**/*.py"), PROJECT_ROOT / "README.md", *PROJECT_ROOT.glob("configs/*.toml")]:
        for task, rest in INVOKE_HINT.findall(path.read_text()):
            if task not in accepted:
                wrong.append(f"{path.name}: invoke {task} (no such task)")
                continue
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest):
                if flag.split("=")[0] not in accepted[task]:
                    wrong.append(f"{path.name}: invoke {task} {flag}")
    assert wrong == []
