"""Write /etc/torchbake/constraints.txt: torch and every package built from source, exactly.

Active for every later pip install through PIP_CONSTRAINT / PIP_BUILD_CONSTRAINT, so nothing
installed after the source builds (in this image or an image built FROM it) can replace them.
"""

import contextlib
import glob
import json
from importlib import metadata

pins = {}
with contextlib.suppress(metadata.PackageNotFoundError):
    pins["torch"] = metadata.version("torch")
for path in sorted(glob.glob("/etc/torchbake/built/*.json")):
    with open(path) as fh:
        record = json.load(fh)
    pins[record["name"].lower().replace("_", "-")] = record["version"]
with open("/etc/torchbake/constraints.txt", "w") as fh:
    fh.write("# Written by torchbake: the torch this image was built with stays installed.\n")
    fh.write("# Active for every pip install through PIP_CONSTRAINT / PIP_BUILD_CONSTRAINT.\n")
    for name, version in pins.items():
        fh.write(f"{name}=={version}\n")
print("torchbake: pinned " + ", ".join(f"{n}=={v}" for n, v in pins.items()))
