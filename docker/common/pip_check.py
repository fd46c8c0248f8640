"""`pip check` (or `uv pip check`) passed on but for one known mislabel, for the image's last step
(record_installed.sh) and verify alike.

NVIDIA's aarch64 CUDA wheels (torch's dependencies on arm64) are named ``..._aarch64.whl`` but
their WHEEL file says ``Tag: py3-none-manylinux2014_sbsa`` (Arm's server architecture), a
platform neither uv nor pip knows. Each package a check calls "built for a different platform" /
"not supported on this platform" is accepted only where this machine is aarch64 and every tag its
WHEEL file holds is an sbsa one; any other complaint fails.

Usage: python pip_check.py COMMAND [ARGS...]   (its output, then its verdict as the exit status)
"""

import platform
import re
import subprocess
import sys
from importlib import metadata

NOISE = re.compile(r"(Using Python|Checked|Found \d+ incompatibilit|No broken requirements)")
MISLABELLED = (re.compile(r"The package `([^`]+)` was built for a different platform"),
               re.compile(r"^(\S+) \S+ is not supported on this platform", re.M))


def sbsa_only(name: str) -> bool:
    wheel = metadata.distribution(name).read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    return bool(tags) and all(tag.endswith("_sbsa") for tag in tags)


def main(argv: list[str]) -> int:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = done.stdout
    sys.stdout.write(said)
    if done.returncode == 0:
        return 0
    names = [name for pattern in MISLABELLED for name in pattern.findall(said)]
    other = [line for line in said.splitlines() if line.strip() and not NOISE.match(line)
             and not any(pattern.search(line) for pattern in MISLABELLED)]
    if other or not names or platform.machine() != "aarch64" or not all(map(sbsa_only, names)):
        return done.returncode
    print(f"torchbake: accepted {', '.join(names)}: aarch64 wheels whose WHEEL file names the platform sbsa")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
