"""Modules imported on first use: the docker SDK, plumbum and the work behind each task (builder,
variants, runner, cleanup, containers, base_os) cost tens of milliseconds that `invoke --list`,
`invoke --help` and a command refused for its flags never need."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for module ``names[0]``; the first attribute read imports it (and ``names[1:]``,
    its submodules that the package does not import itself). One thread imports it while the
    others wait: build-all's workers reach the SDK at the same moment, and two threads importing
    one package side by side can each see it half made ("module 'docker' has no attribute
    'errors'", seen when an unchanged build's engine calls stopped importing it first)."""

    _lock = threading.RLock()

    def __init__(self, *names: str):
        self._names = names
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            with self._lock:
                if self._module is None:
                    for name in reversed(self._names):
                        module = importlib.import_module(name)
                    self._module = module
        return getattr(self._module, attribute)
