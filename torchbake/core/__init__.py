"""The ground every other package stands on: the errors and their exit codes (``errors``), the
words a build's outcome is written with (``status``), the one output channel (``output``), secrets
masked wherever text goes (``redaction``), atomic writes and locks (``files``), modules imported on
first use (``lazy``), where torchbake's own files are (``data``), the one time a build writes
into its image (``build_time``) and image references split into name, tag and digest (``references``).

May use: the standard library and third-party packages only, nothing else of torchbake.
"""
