"""Vendor patches ([dev] patches): patch files a dev build applies, in order, to a source tree
before it compiles, as torch_musa keeps patches for PyTorch beside its source and applies them
first (its ``build.sh -t``).

Each entry is ``SOURCE=PATH``: a ``.patch`` (or ``.diff``) file, or a folder of them applied by
name. The context carries them as ``patches/<SOURCE>/NN-<name>`` (docker/common/apply_patches.sh
applies them there, before build_source.sh compiles the tree); their digests are in the input
hash, a label and the build's record. Where the tree is on this host at the commit the build
compiles (the base image records it), each patch is checked there before any build work: one that
does not apply is exit 2, naming the patch, the file and the commit.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from torchbake.adapters import command
from torchbake.core.errors import ConfigurationError

SUFFIXES = (".patch", ".diff")


@dataclass(frozen=True)
class Patch:
    source: str  # pytorch, vision, audio, extension
    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.path.name


def read(entries: Iterable[str]) -> list[Patch]:
    """The patches ``entries`` (``SOURCE=PATH``, checked when the configuration was read) name, in
    the order they apply: each entry in turn, a folder's files by name."""
    found = []
    for entry in entries:
        source, _, path = entry.partition("=")
        given = Path(path).expanduser()
        files = sorted(p for p in given.iterdir() if p.suffix in SUFFIXES) if given.is_dir() else [given]
        found += [Patch(source, file.resolve(), hashlib.sha256(file.read_bytes()).hexdigest()) for file in files]
    return found


def by_source(patches: Iterable[Patch]) -> dict[str, list[dict[str, str]]]:
    """source → [{name, sha256}] in order: the input hash's material, the label, the record."""
    found: dict[str, list[dict[str, str]]] = {}
    for patch in patches:
        found.setdefault(patch.source, []).append({"name": patch.name, "sha256": patch.sha256})
    return found


def stage(patches: Iterable[Patch], folder: Path) -> None:
    """``folder`` (the context's patches/) with ``patches/<source>/NNNN-<name>``, numbered in order;
    a folder for every source, empty where it has none (each compile step mounts its own: a patch
    of the extension runs that step again, not PyTorch's compile)."""
    from torchbake.configuration.validation import PATCHED_SOURCES

    for source in PATCHED_SOURCES:
        (folder / source).mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for patch in patches:
        counts[patch.source] = counts.get(patch.source, 0) + 1
        shutil.copyfile(patch.path, folder / patch.source / f"{counts[patch.source]:04d}-{patch.name}")


def check(patches: Iterable[Patch], trees: Mapping[str, tuple[Path, str]]) -> None:
    """Each patch of a source whose tree is here (``trees``: source → (its clone at the commit the
    build compiles, that commit)) applies to it after the ones before it: ``git apply --check`` of
    them all in order, on a copy of the files they touch; one that does not is a ConfigurationError."""
    import tempfile

    for source, (tree, commit) in trees.items():
        mine = [p for p in patches if p.source == source]
        if not mine:
            continue
        with tempfile.TemporaryDirectory(prefix="torchbake-patches-") as scratch:
            work = Path(scratch) / source
            work.mkdir()
            for name in touched(mine):  # the files the patches touch, not the whole tree (PyTorch's is 1 GB)
                if (tree / name).is_file() and (tree / name).resolve().is_relative_to(tree.resolve()):
                    (work / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(tree / name, work / name)
            for patch in mine:
                applied = command.run(["git", "apply", "--whitespace=nowarn", str(patch.path)], cwd=work, capture=True,
                                      check=False, echo=False, env={"GIT_DIR": str(Path(scratch) / "none")})
                if applied.returncode != 0:
                    said = applied.output.strip().splitlines()
                    raise ConfigurationError(
                        f"[dev] patches: {patch.path} does not apply to {source} at {commit[:12]} ({tree}):"
                        f" {'; '.join(said[:3]) or 'git apply refused it'}. Nothing was built. Make it against that"
                        f" commit (or drop it from [dev] patches / --patch {source}=…).")


def touched(patches: Iterable[Patch]) -> set[str]:
    """The paths (relative to the tree) the patches read or write, as git apply reads their headers
    (``-p1``: any first folder, names with spaces, renames and copies by their sources too)."""
    import re

    found = set()
    for patch in patches:
        listed = command.run(["git", "apply", "--numstat", "-z", str(patch.path)], capture=True, check=False, echo=False,
                             env={"GIT_DIR": "/nonexistent"})
        found.update(name for entry in listed.output.split("\0") if (name := entry.rpartition("\t")[2]))
        text = patch.path.read_text(errors="replace")
        found.update(m[1] for m in re.finditer(r"^(?:rename|copy) from (.+)$", text, re.MULTILINE))
    return found
