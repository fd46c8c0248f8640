"""The ``torchbake`` command: invoke's ``Program`` serving the task collection of
``torchbake.tasks`` from any folder (no tasks.py is searched for), with ``--version``.
``torchbake build --release`` is ``invoke build --release`` in this repository."""

from __future__ import annotations

import os
import sys

from invoke import Program

from torchbake.core import output
from torchbake.tasks import ns


def main() -> None:
    import torchbake

    output.PROGRAM = "torchbake"  # the hints torchbake prints name the command that was typed
    for task in ns.tasks.values():  # and so do the tasks' --help texts
        task.__doc__ = output.as_typed(task.__doc__ or "")
        task.help = {name: output.as_typed(text) for name, text in task.help.items()}
    try:
        Program(name="torchbake", binary="torchbake", namespace=ns, version=torchbake.__version__).run()
    except BrokenPipeError:  # `torchbake --list | head`: the reader stopped; stop quietly, as other commands do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for such a command


if __name__ == "__main__":
    main()
