"""The nightly matrix: cells expanded, selected and sharded (``matrix``) and run in dependency
order, in parallel, with a summary table and reports (``runner``).

May use: ``torchbake.building`` and the layers below it.
"""
