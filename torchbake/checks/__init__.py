"""Whether an image does what it should: the in-container checks and their table (``verify``), the
host's devices for an accelerator (``devices``, ``access``; a family with checks in code is one
module of ``families``), and the GPU judgement (``gpu_probe``, run inside images too, and
``gpu_check``, the host's GPUs against an image's arch list).

May use: ``torchbake.variants`` and the layers below it.
"""
