"""torchbake's invoke tasks: this file only composes the collections in torchbake.tasks.

    invoke --list              every task
    invoke --help build        a task's flags
"""

from invoke import Collection

from torchbake.tasks import bootstrap, build, containers, gc, inspect, matrix

ns = Collection()
for collection in (build.ns, matrix.ns, inspect.ns, containers.ns, bootstrap.ns, gc.ns):
    for task_ in collection.tasks.values():
        ns.add_task(task_)
