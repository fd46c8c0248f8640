"""What can be set and how it resolves: every option declared once (``settings``) with its flag
(``options``), the checks with "what is accepted" messages (``validation``), options derived when
nobody set them (``derived``), a team's repository (``project``), accelerators, platforms and OS
releases as data (``accelerators``, ``platforms``, ``os_releases``), how hard to try the network
(``network``) and where torchbake writes (``writable``). Resolving the layers for one image is
``torchbake.planning.config``: it needs the variants, which sit above.

May use: ``torchbake.families`` and the layers below it.
"""
