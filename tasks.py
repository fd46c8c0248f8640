"""torchbake's invoke tasks, for `invoke` in this repository (the installed `torchbake` command
serves the same collection):

    invoke --list              every task
    invoke --help build        a task's flags

A team's own repository adds its tasks beside them the same way (README: "Your own tasks").
"""

from torchbake.tasks import ns  # noqa: F401 (the collection invoke reads)
