"""Containers from built images (``containers``: ``run-container``, reuse, devices, emulated
platforms, ``stop-container``).

May use: ``torchbake.building`` and the layers below it.
"""
