"""Merge torchbake's engine settings (scripts/engine-settings.json) into a dockerd settings file.

Usage: python3 scripts/engine_settings.py SETTINGS

Every setting of ours that SETTINGS lacks is added; every setting already there, the user's own,
is kept as it is. The file is replaced whole (written beside it, then renamed), never half-written.
Standard library only: scripts/ensure-engine.sh runs it with the system's python3, before any
virtual environment exists.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

OURS = Path(__file__).with_name("engine-settings.json")


def merged(theirs: dict, ours: dict) -> dict:
    """``theirs`` with each key of ``ours`` it lacks, at any depth; where both have a key, theirs."""
    result = dict(theirs)
    for key, value in ours.items():
        if key not in result:
            result[key] = value
        elif isinstance(result[key], dict) and isinstance(value, dict):
            result[key] = merged(result[key], value)
    return result


def refused(settings: Path, why: str) -> int:
    """Exit 2, the file left as it is."""
    print(f"engine_settings: {settings} {why}; fix it and run scripts/ensure-engine.sh again.", file=sys.stderr)
    return 2


def main(path: str) -> int:
    settings = Path(path)
    text = settings.read_text() if settings.exists() else ""
    try:
        theirs = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as error:
        return refused(settings, f"is not JSON ({error})")
    if not isinstance(theirs, dict):
        return refused(settings, "holds no JSON object")
    result = merged(theirs, json.loads(OURS.read_text()))
    if result == theirs and settings.exists():
        return 0
    settings.parent.mkdir(parents=True, exist_ok=True)
    new = settings.with_name(settings.name + ".torchbake-new")
    new.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(new, settings)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
