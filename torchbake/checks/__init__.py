"""Whether an image does what it should: the in-container checks and their table (``verify``), the
host's devices for an accelerator (``devices``: its declaration as data, or its family's module,
torchbake.families), and ``gpu_check``: the host's GPUs against an image's arch list.

May use: ``torchbake.variants`` and the layers below it.
"""
