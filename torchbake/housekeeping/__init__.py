"""What ``invoke gc`` may remove (only what torchbake made and nothing uses) and removing it
(``cleanup``).

May use: ``torchbake.building`` and the layers below it.
"""
