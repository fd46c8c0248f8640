"""Where every input of a build came from: an in-toto Statement v1 with a SLSA Provenance v1
predicate (https://slsa.dev/spec/v1.0/provenance).

BuildKit's own attestation sees only the build context; torchbake knows each input's origin and
digest: the wheels and toolkits (URL or requirement and sha256), the base image (reference and
id), the Dockerfile and the in-image scripts, the source trees (repository at a commit). The
external parameters are the options as resolved, never a secret: credentials of URLs are masked,
and options that are secrets themselves are left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from torchbake.configuration.validation import local_name
from torchbake.core.redaction import redact, redact_all
from torchbake.inputs.downloads import split_fragment

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
MEDIA_TYPE = "application/vnd.in-toto+json"
SUFFIX = ".provenance.json"
BUILD_TYPE = "urn:torchbake:build:{variant}:v1"  # one build type per variant: its parameters differ
# Options whose value is a secret or names one: left out of the parameters, not just masked.
SECRET_OPTIONS = ("dev.git_credential_file", "dev.ccache_remote")


def _digest(value: str) -> dict[str, str]:
    hex_digest = value.split(":", 1)[-1]
    return {"sha256": hex_digest} if hex_digest else {}


def statement(*, image: str, image_id: str, variant: str, configuration: Mapping[str, Any],
              inputs: Sequence[Mapping[str, Any]], files: Mapping[str, str], base: Mapping[str, str],
              sources: Mapping[str, Mapping[str, Any]], recipe: Mapping[str, str], builder: Mapping[str, str],
              started: str, finished: str, invocation: str) -> dict[str, Any]:
    """The statement of one build. ``inputs``: the manifest's given inputs (option, location,
    sha256); ``files``: every file of the context by name (wheels, tarballs) and its sha256;
    ``base``: reference and id of the FROM image; ``sources``: tree → repo, commit (tag);
    ``recipe``: Dockerfile and scripts → sha256; ``builder``: tool → version."""
    parameters = {key: redact_all(value) for key, value in sorted(configuration.items())
                  if key not in SECRET_OPTIONS and value not in ("", [], {}, None)}
    given = {local_name(str(entry.get("location", ""))): entry for entry in inputs}
    dependencies = []
    for file_name, sha in sorted(files.items()):
        entry = given.get(file_name, {})
        location = redact(split_fragment(str(entry.get("location", "")))[0])
        dependencies.append({"name": file_name, "uri": location if "://" in location else f"file:{file_name}",
                             "digest": {"sha256": sha},
                             **({"annotations": {"option": entry["option"]}} if entry.get("option") else {})})
    for entry in inputs:  # a requirement pip resolved: its wheels are among the files above
        location = str(entry.get("location", ""))
        if "://" not in location and not entry.get("sha256") and location:
            dependencies.append({"name": entry.get("option", ""), "uri": f"pkg:pypi/{redact(location)}",
                                 "annotations": {"resolved": "by pip, on the build host; its wheels are listed"}})
    if base.get("reference"):
        dependencies.append({"name": "base image", "uri": f"docker-image:{base['reference']}",
                             "digest": _digest(base.get("id", ""))})
    for name, sha in sorted(recipe.items()):
        dependencies.append({"name": name, "uri": f"torchbake:{name}", "digest": {"sha256": sha}})
    for tree, facts in sorted(sources.items()):
        repo, commit = redact(str(facts.get("repo", ""))), str(facts.get("commit", ""))
        if commit:
            dependencies.append({"name": f"source {tree}", "uri": f"git+{repo}@{commit}" if repo else f"git:{tree}",
                                 "digest": {"gitCommit": commit}})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image, "digest": _digest(image_id)}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE.format(variant=variant),
                "externalParameters": parameters,
                "internalParameters": {"variant": variant},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": "urn:torchbake:builder", "version": dict(builder)},
                "metadata": {"invocationId": invocation, "startedOn": started, "finishedOn": finished},
            },
        },
    }


def to_text(document: Mapping[str, Any]) -> str:
    return json.dumps(redact_all(document), indent=2, sort_keys=True) + "\n"
