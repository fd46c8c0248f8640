"""invoke task collections, one module per area, and :data:`ns`: all of them, the collection that
the ``torchbake`` command serves and this repository's ``tasks.py`` (or a team's own) imports."""

from invoke import Collection

from . import bootstrap, build, containers, contents, gc, inspect, matrix

ns = Collection()
for collection in (build.ns, matrix.ns, inspect.ns, contents.ns, containers.ns, bootstrap.ns, gc.ns):
    for task_ in collection.tasks.values():
        ns.add_task(task_)
