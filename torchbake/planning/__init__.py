"""One image's plan, before any work: the configuration's layers (defaults < files < environment
< flags) resolved for the variant built, with each value's source (``config``), and the plan as
text for ``--dry-run`` (``plan``).

May use: ``torchbake.variants`` and the layers below it.
"""
