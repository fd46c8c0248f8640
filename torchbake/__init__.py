"""torchbake: build, verify, publish and run PyTorch container images."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """``__version__``: the installed distribution's version (its metadata), read when asked."""
    if name != "__version__":
        raise AttributeError(f"module 'torchbake' has no attribute {name!r}")
    from importlib import metadata

    try:
        return metadata.version("torchbake")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"
