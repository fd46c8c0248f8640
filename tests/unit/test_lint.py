"""Static checks of the project's own code, and of what it generates."""

from __future__ import annotations

import re
import subprocess
import sys

from torchbake.config import PROJECT_ROOT


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "torchbake", "tests", "tasks.py", "benchmarks"],
                            cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_shell_true_and_no_tls_switched_off():
    banned = re.compile(r"shell=True|--no-check-certificate|sslVerify\s*=?\s*false|--trusted-host|GIT_SSL_NO_VERIFY|curl\s+(-\w*k|--insecure)")
    offenders = []
    for folder in ("torchbake", "docker", "scripts", "configs"):
        for path in (PROJECT_ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".sh", ".toml", "") or path.name.startswith("dockerfile"):
                if path.is_file() and banned.search(path.read_text(errors="replace")):
                    offenders.append(str(path.relative_to(PROJECT_ROOT)))
    assert offenders == []
