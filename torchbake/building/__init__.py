"""One image built: the shared sequence (``builder``: preflight, input hash, skip or re-tag, prepare,
build, verify, promote), what decides an image (``input_hash``), candidate tags (``candidates``),
the free-space preflight (``diskspace``), images for several platforms joined under one tag
(``platform_builds``), pushing and the registry's copy (``publishing``) and the reproducibility
comparison (``reproducible``).

May use: ``torchbake.planning``, ``torchbake.checks`` and the layers below them.
"""
