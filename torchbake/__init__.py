"""torchbake: build, verify, publish and run PyTorch container images."""

__version__ = "0.1.0"
