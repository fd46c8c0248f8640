"""The outside world behind typed calls: host commands (``command``: argument lists, the ``+ cmd``
echo, process-group stop), the Engine API (``engine``), the docker CLI for BuildKit builds and
terminals (``docker_cli``) and registries asked without pulling (``registry``). Nothing above
talks to a process, an engine or a registry except through these.

May use: ``torchbake.configuration`` and the layers below it.
"""
