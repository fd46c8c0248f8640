"""Record what a source build installed: /etc/torchbake/built/<role>.json.

Usage: python record_built.py PIP_REPORT ROLE COMMIT SOURCE_DIR
"""

import json
import os
import sys

report_path, role, commit, source = sys.argv[1:5]
with open(report_path) as fh:
    report = json.load(fh)
installed = [item["metadata"] for item in report.get("install", [])]
if not installed:
    sys.exit(f"torchbake: pip installed nothing from {source}")
os.makedirs("/etc/torchbake/built", exist_ok=True)
record = {"role": role, "name": installed[0]["name"], "version": installed[0]["version"],
          "commit": commit, "source": source}
with open(f"/etc/torchbake/built/{role}.json", "w") as fh:
    json.dump(record, fh, indent=2)
print(f"torchbake: built {record['name']} {record['version']} from {source} at {commit}")
