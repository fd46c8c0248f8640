"""invoke task collections, one module per area, and :data:`ns`: all of them, the collection that
the ``torchbake`` command serves and this repository's ``tasks.py`` (or a team's own) imports.
Task modules parse flags and call into the packages below; ``cli`` is what they share (flag
tasks, error reporting and exit statuses, the settings of a run).

May use: ``torchbake.fleet``, ``torchbake.running``, ``torchbake.housekeeping`` and the layers below them.
"""

from invoke import Collection

from torchbake.tasks import bootstrap, build, containers, contents, gc, help, inspect, lock, matrix  # noqa: F401, A004 (help: the --help printer)

ns = Collection()
for collection in (build.ns, lock.ns, matrix.ns, inspect.ns, contents.ns, containers.ns, bootstrap.ns, gc.ns):
    for task_ in collection.tasks.values():
        ns.add_task(task_)
