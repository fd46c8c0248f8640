"""Source trees at pinned tags: found in the user's source root (checked, never modified) or
shallow-cloned, with shallow submodules, into torchbake's shared source cache.

A clone under the source root is used only when its HEAD is the requested tag and every
submodule is initialised at the recorded commit; anything else is an error naming what was
found and what is wanted. Cache clones are made in a temporary folder and renamed into place
when complete, so an interrupted clone never looks like a good one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from torchbake.adapters import command
from torchbake.core import output
from torchbake.core.errors import CommandError, ConfigurationError
from torchbake.core.files import read_back
from torchbake.inputs.downloads import file_lock

COMPLETE = ".torchbake-complete"
GIT_TIMEOUT = 120.0


@dataclass(frozen=True)
class SourceSpec:
    name: str  # folder name: pytorch, vision, audio
    repo: str
    tag: str


@dataclass(frozen=True)
class SourceTree:
    spec: SourceSpec
    path: Path
    commit: str
    origin: str  # "source root" or "cache"


def _git(*args: str, cwd: Path | None = None, check: bool = True, timeout: float = GIT_TIMEOUT) -> command.CommandResult:
    return command.run(["git", *args], cwd=cwd, capture=True, check=check, echo=False, timeout=timeout,
                       error=CommandError)


def describe_head(path: Path) -> str:
    """What HEAD is, for messages: a tag, a branch or a short commit."""
    for args in (("describe", "--tags", "--exact-match", "HEAD"), ("symbolic-ref", "--short", "HEAD")):
        result = _git(*args, cwd=path, check=False)
        if result.returncode == 0 and result.output.strip():
            return result.output.strip()
    return _git("rev-parse", "--short", "HEAD", cwd=path).output.strip()


def check_clone(path: Path, spec: SourceSpec, *, where: str) -> SourceTree:
    """``path`` must be a git clone at ``spec.tag`` with initialised submodules."""
    if _git("rev-parse", "--is-inside-work-tree", cwd=path, check=False).returncode != 0:
        raise ConfigurationError(f"{path} ({where}) is not a git clone of {spec.name}.")
    head = _git("rev-parse", "HEAD", cwd=path).output.strip()
    wanted = _git("rev-parse", "--verify", "--quiet", f"{spec.tag}^{{commit}}", cwd=path, check=False)
    if wanted.returncode != 0:
        raise ConfigurationError(
            f"{path} ({where}) has no tag {spec.tag!r} (its HEAD is {describe_head(path)})."
            f" Check out {spec.tag} there yourself, or remove that clone from the source root so"
            " torchbake clones the tag into its cache."
        )
    if wanted.output.strip() != head:
        raise ConfigurationError(
            f"{path} ({where}) is at {describe_head(path)}, but {spec.tag} is wanted."
            f" torchbake does not change your clone: run `git -C {path} checkout {spec.tag} &&"
            f" git -C {path} submodule update --init --recursive`, or pass the tag you have"
            f" (--{spec.name}-tag)."
        )
    status = _git("submodule", "status", "--recursive", cwd=path).output
    bad = [line.split()[1] for line in status.splitlines() if line[:1] in ("-", "+", "U")]
    if bad:
        raise ConfigurationError(
            f"{path} ({where}) has submodules that are not initialised at their recorded commits:"
            f" {', '.join(bad[:5])}{' …' if len(bad) > 5 else ''}. Run"
            f" `git -C {path} submodule update --init --recursive`."
        )
    return SourceTree(spec=spec, path=path, commit=head, origin=where)


def credential_args(credential_file: str) -> list[str]:
    """git options that read credentials from a file for this one command (nothing is stored)."""
    return ["-c", "credential.helper=", "-c", f"credential.helper=store --file={credential_file}"] if credential_file else []


def remote_commit(spec: SourceSpec, credential_file: str = "") -> tuple[str, str]:
    """(the commit the tag or branch points at now, "") from a quick ``git ls-remote``; ("", why)
    when the repository cannot be asked. A repository that answers without the tag or branch is
    an error."""
    result = command.run(
        ["git", *credential_args(credential_file), "ls-remote", "--exit-code", spec.repo,
         f"refs/tags/{spec.tag}^{{}}", f"refs/tags/{spec.tag}", f"refs/heads/{spec.tag}"],
        capture=True, check=False, echo=False, timeout=60, idle_timeout=command.STALL, env={"GIT_TERMINAL_PROMPT": "0"},
    )
    if result.returncode == 2:
        raise ConfigurationError(f"{spec.repo} has no tag or branch {spec.tag!r} (sources.{spec.name}_tag).")
    if result.returncode != 0:
        return "", result.output.strip()[-500:]
    refs = dict(reversed(line.split("\t", 1)) for line in result.output.splitlines() if "\t" in line)
    for ref in (f"refs/tags/{spec.tag}^{{}}", f"refs/tags/{spec.tag}", f"refs/heads/{spec.tag}"):
        if ref in refs:
            return refs[ref], ""
    return "", "no commit in its answer"


def check_reachable(spec: SourceSpec, credential_file: str = "") -> str:
    """The repository answers and has the tag or branch (a quick ``git ls-remote``), before slow
    work. Returns the commit it points at."""
    commit, why = remote_commit(spec, credential_file)
    if not commit:
        raise ConfigurationError(
            f"Cannot reach {spec.repo} (sources.{spec.name}_repo): {why}\n"
            "Check the URL, the network and the credentials (--git-credential-file), or put a clone"
            " at that tag under --source-root."
        )
    return commit


def cache_path(cache_root: Path, spec: SourceSpec) -> Path:
    digest = hashlib.sha256(spec.repo.encode()).hexdigest()[:10]
    return cache_root / f"{spec.name}-{spec.tag.replace('/', '_')}-{digest}"


def cached_tree(cache_root: Path, spec: SourceSpec) -> SourceTree | None:
    path = cache_path(cache_root, spec)
    commit = (read_back(path / COMPLETE) or "").strip()
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):  # missing or damaged: fetched again
        return None
    return SourceTree(spec=spec, path=path, commit=commit, origin="cache")


def clone_into_cache(cache_root: Path, spec: SourceSpec, log_file: Path | None) -> SourceTree:
    final = cache_path(cache_root, spec)
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cache_root.mkdir(parents=True, exist_ok=True)
    command.run(
        ["git", "clone", "--depth", "1", "--branch", spec.tag, "--recurse-submodules", "--shallow-submodules",
         "--jobs", "4", spec.repo, str(partial)],
        log_file=log_file, error=CommandError, idle_timeout=command.STALL,
        failure_hint=f"Cloning {spec.name} at {spec.tag} failed; nothing was kept in the cache.",
    )
    commit = _git("rev-parse", "HEAD", cwd=partial).output.strip()
    (partial / COMPLETE).write_text(commit + "\n")
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return SourceTree(spec=spec, path=final, commit=commit, origin="cache")


def find_in_root(root: str, spec: SourceSpec) -> SourceTree | None:
    if not root:
        return None
    candidate = Path(root).expanduser() / spec.name
    if not candidate.exists():
        return None
    return check_clone(candidate, spec, where="source root")


def locate(specs: list[SourceSpec], root: str, cache_root: Path) -> tuple[list[SourceTree], dict[str, str]]:
    """Every check, before any slow work: trees found in the source root (at the right tag, or an
    error) or in the cache while their tag still points where it did (a tag moved upstream is the
    same name for other sources: the remote is asked), and the specs still to clone with the
    commit their tag points at (reachable, with the tag, or an error)."""
    say = output.channel().say
    found, missing = [], {}
    for spec in specs:
        tree = find_in_root(root, spec)
        if tree is None and (cached := cached_tree(cache_root, spec)) is not None:
            current, why = remote_commit(spec)
            if not current:  # offline: the clone this cache holds, said as such
                say(("Warning:", "yellow"), f" could not ask {spec.repo} where {spec.tag} points now"
                    f" ({why.splitlines()[-1] if why else 'no answer'}); using the cached clone at {cached.commit[:12]}.")
                tree = cached
            elif current == cached.commit:
                tree = cached
            else:
                say(f"{spec.repo} {spec.tag} moved from {cached.commit[:12]} to {current[:12]} since it was cloned:"
                    " cloning it again.")
                missing[spec.name] = current
                continue
        if tree is not None:
            found.append(tree)
        else:
            missing[spec.name] = check_reachable(spec)
    return found, missing


def resolve(specs: list[SourceSpec], root: str, cache_root: Path, commits: dict[str, str],
            log_file: Path | None) -> list[SourceTree]:
    """Every tree, from the source root, the cache, or a new shallow clone (in that order), each
    at the commit :func:`locate` found for it (``commits``: the ones the build's input hash holds;
    the remotes are not asked again)."""
    trees = []
    for spec in specs:
        tree = find_in_root(root, spec)
        if tree is None:
            wanted = commits[spec.name]
            with file_lock(cache_path(cache_root, spec).with_suffix(".lock")):
                tree = cached_tree(cache_root, spec)  # another run may have cloned it meanwhile
                if tree is None or tree.commit != wanted:
                    tree = clone_into_cache(cache_root, spec, log_file)
            if tree.commit != wanted:
                raise ConfigurationError(
                    f"{spec.repo} {spec.tag} moved to {tree.commit[:12]} while this build was being planned (it"
                    f" was at {wanted[:12]}); build again.")
        trees.append(tree)
    return trees


def link_tree(source: Path, target: Path, *, keep_git: bool) -> int:
    """Recreate ``source`` under ``target`` with hard links (copies across file systems);
    ``.git`` folders and files are left out unless ``keep_git``. Returns the number of files."""
    count = 0
    for folder_name, dirs, files in os.walk(source):
        folder = Path(folder_name)
        out = target / folder.relative_to(source)
        out.mkdir(parents=True, exist_ok=True)
        skip = {COMPLETE} if keep_git else {COMPLETE, ".git"}
        for name in [d for d in dirs if (folder / d).is_symlink()]:
            (out / name).symlink_to((folder / name).readlink())
        dirs[:] = [d for d in dirs if d not in skip and not (folder / d).is_symlink()]
        for name in files:
            if name in skip:
                continue
            src, dst = folder / name, out / name
            if src.is_symlink():
                dst.symlink_to(src.readlink())
            else:
                try:
                    dst.hardlink_to(src)
                except OSError:
                    shutil.copy2(src, dst)
            count += 1
    return count
