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
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbake.configuration.settings import TOOLKITS_SECTION, image_options
from torchbake.configuration.validation import local_name
from torchbake.core import references
from torchbake.core.redaction import redact, redact_all
from torchbake.inputs.downloads import split_fragment

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
MEDIA_TYPE = "application/vnd.in-toto+json"
SUFFIX = ".provenance.json"
BUILD_TYPE = "urn:torchbake:build:{variant}:v1"  # one build type per variant: its parameters differ
# Options whose value is a secret or names one: left out of the parameters, not just masked.
SECRET_OPTIONS = ("dev.git_credential_file", "dev.compile_cache", "notify.webhook")


def _digest(value: str) -> dict[str, str]:
    hex_digest = value.split(":", 1)[-1]
    return {"sha256": hex_digest} if hex_digest else {}


def statement(*, image: str, image_id: str, variant: str, configuration: Mapping[str, Any],
              inputs: Sequence[Mapping[str, Any]], files: Mapping[str, str], base: Mapping[str, str],
              sources: Mapping[str, Mapping[str, Any]], recipe: Mapping[str, str], builder: Mapping[str, str],
              started: str, finished: str, invocation: str,
              debs_added: Sequence[Mapping[str, str]] | None = None, lock: str = "") -> dict[str, Any]:
    """The statement of one build. ``inputs``: the manifest's given inputs (option, location,
    sha256); ``files``: every file of the context by name (wheels, tarballs) and its sha256;
    ``base``: reference, digest (its manifest's, "" when unknown) and image id of the FROM image;
    ``sources``: tree → repo, commit (tag); ``recipe``: Dockerfile and scripts → sha256;
    ``builder``: tool → version; ``debs_added``: the Debian packages the build installed on top of
    the base (name, version, architecture, purl, url and digest of the .deb apt fetched; None: they
    could not be told)."""
    decides = image_options(variant)
    parameters = {key: redact_all(value) for key, value in sorted(configuration.items())
                  if (key in decides or key.startswith(f"{TOOLKITS_SECTION}.")) and key not in SECRET_OPTIONS
                  and value not in ("", [], {}, None)}
    given = {local_name(str(entry.get("location", ""))): entry for entry in inputs}
    index = redact(str(configuration.get("wheels.index_url", "")) or "pip's configured index")
    dependencies = []
    for file_name, sha in sorted(files.items()):
        entry = given.get(file_name, {})
        location = redact(split_fragment(str(entry.get("location", "")))[0])
        if "://" in location:
            origin = {"uri": location}
        elif location:  # a file given by its path on the build host
            origin = {"uri": Path(location).expanduser().resolve().as_uri()}
        else:  # a wheel pip resolved: where from is its index
            origin = {"annotations": {"resolvedBy": "pip download, on the build host", "index": index}}
        dependencies.append({"name": file_name, "digest": {"sha256": sha}, **origin})
        if entry.get("option"):
            dependencies[-1].setdefault("annotations", {})["option"] = entry["option"]
    for entry in inputs:  # a requirement pip resolved: its wheels are among the files above
        location = str(entry.get("location", ""))
        if "://" not in location and not entry.get("sha256") and location:
            dependencies.append({"name": entry.get("option", ""), "uri": requirement_purl(redact(location)),
                                 "annotations": {"requirement": redact(location),
                                                 "resolved": "by pip, on the build host; its wheels are listed"}})
    if base.get("reference"):
        dependencies.append(base_dependency(base))
    version = builder.get("torchbake", "")
    for name, sha in sorted(recipe.items()):
        dependencies.append({"name": name, "uri": purl("pypi", "", "torchbake", version, subpath=RECIPE_FILES.get(name, name)),
                             "digest": {"sha256": sha}, "annotations": {"from": "torchbake's own files, as rendered"}})
    for tree, facts in sorted(sources.items()):
        repo, commit = redact(str(facts.get("repo", ""))), str(facts.get("commit", ""))
        if commit:
            dependencies.append({"name": f"source {tree}", **({"uri": f"git+{repo}@{commit}"} if repo else {}),
                                 "digest": {"gitCommit": commit}})
    if lock:  # "<file name> sha256:<hex>": the lock file whose wheels the build installed
        name, _, digest = lock.rpartition(" sha256:")
        dependencies.append({"name": f"lock {name}", "digest": {"sha256": digest},
                             "annotations": {"from": "the PEP 751 lock in [build] locks the wheels were installed"
                                                     " from, exactly"}})
    for deb in debs_added or ():
        dependencies.append({"name": f"deb {deb['name']}", "uri": deb["purl"],
                             **({"digest": dict(deb["digest"])} if deb.get("digest") else {}),
                             **({"downloadLocation": redact(deb["url"])} if deb.get("url") else {}),
                             "annotations": {"installedBy": "apt-get, in the build, on top of the base image",
                                             **({} if deb.get("digest") else
                                                {"digest": "not recorded: apt fetched nothing for it in this build"
                                                           " (the base image, or an earlier build, had the file)"})}})
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


# recipe entries → the file of torchbake's distribution they come from
RECIPE_FILES = {"Dockerfile": "docker/ubuntu", "common/": "docker/common"}


def purl(kind: str, namespace: str, name: str, version: str, subpath: str = "", **qualifiers: str) -> str:
    from packageurl import PackageURL

    return PackageURL(type=kind, namespace=namespace or None, name=name, version=version or None,
                      qualifiers={k: v for k, v in qualifiers.items() if v} or None, subpath=subpath or None).to_string()


def requirement_purl(requirement: str) -> str:
    """The package URL of a pip requirement: ``torch==2.13.0`` → ``pkg:pypi/torch@2.13.0``; a range
    names the project only (``pkg:pypi/torch``)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return purl("generic", "", re.sub(r"[^A-Za-z0-9._-]+", "-", requirement).strip("-") or "requirement", "")
    pins = [spec.version for spec in parsed.specifier if spec.operator in ("==", "===") and "*" not in spec.version]
    return purl("pypi", "", str(canonicalize_name(parsed.name)), pins[0] if len(pins) == 1 else "")


def base_dependency(base: Mapping[str, str]) -> dict[str, Any]:
    """The FROM image as a resolved dependency: its manifest's digest where a registry or the image
    store knows it, else its config's digest, said to be that; never a digest of torchbake's own."""
    reference = base["reference"]
    repository, tag, _ = references.split(reference)
    digest = base.get("digest", "")
    found = {"name": "base image", "uri": purl("oci", "", repository.rsplit("/", 1)[-1], digest,
                                                repository_url=repository, tag=tag)}
    if base.get("verified_by"):  # [verify] base_key: its signatures and evidence were checked before the build
        found["annotations"] = {"verifiedBy": f"signatures and evidence by {base['verified_by']}, checked in its"
                                              " registry before the build"}
    if digest:
        found["digest"] = _digest(digest)
    elif base.get("image_id"):
        found["digest"] = _digest(base["image_id"])
        found["annotations"] = {"digestOf": "the image's config: the engine that built on it knows no manifest of it"}
    return found


def to_text(document: Mapping[str, Any]) -> str:
    return json.dumps(redact_all(document), indent=2, sort_keys=True) + "\n"
