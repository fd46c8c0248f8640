"""Source trees at their tags: a cached clone is used while its tag still points where it did; a
tag moved upstream (the same name, other sources) is cloned again before any build; a remote that
cannot be asked leaves the cached clone in use, said as such. Real git repositories on disk."""

from __future__ import annotations

import io
import os
import subprocess

import pytest
from rich.console import Console

from torchbake.core import output
from torchbake.inputs import sources

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=ENV).stdout.strip()


def publish(work, bare, text: str) -> str:
    (work / "core.c").write_text(text)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", text, cwd=work)
    git("tag", "-f", "v2.0.0", cwd=work)
    git("push", "-q", "--force", str(bare), "main", "refs/tags/v2.0.0", cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


def said(monkeypatch) -> io.StringIO:
    printed = io.StringIO()
    channel = output.Channel(Console(file=printed, width=400))
    monkeypatch.setattr(output, "channel", lambda: channel)
    return printed


def test_a_tag_moved_upstream_is_cloned_again_and_an_unanswering_remote_leaves_the_cached_clone(tmp_path, monkeypatch):
    work, bare, cache = tmp_path / "work", tmp_path / "pytorch.git", tmp_path / "cache"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    git("init", "-q", "--bare", "-b", "main", str(bare), cwd=tmp_path)
    first = publish(work, bare, "int a;")
    spec = sources.SourceSpec(name="pytorch", repo=str(bare), tag="v2.0.0")
    printed = said(monkeypatch)

    (tree,) = sources.resolve([spec], "", cache, {"pytorch": first}, None)
    assert tree.commit == first and (tree.path / "core.c").read_text() == "int a;"
    assert sources.locate([spec], "", cache) == ([tree], {})  # the tag still points there: the cached clone

    moved = publish(work, bare, "int b;")
    found, missing = sources.locate([spec], "", cache)
    assert (found, missing) == ([], {"pytorch": moved})
    assert f"{bare} v2.0.0 moved from {first[:12]} to {moved[:12]} since it was cloned: cloning it again." in printed.getvalue()
    (tree,) = sources.resolve([spec], "", cache, missing, None)
    assert tree.commit == moved and (tree.path / "core.c").read_text() == "int b;"
    # a build planned at the old commit (its input hash holds it) clones no other sources under its name
    with pytest.raises(sources.ConfigurationError, match=f"moved to {moved[:12]} while this build was being planned"):
        sources.resolve([spec], "", cache, {"pytorch": first}, None)

    bare.rename(tmp_path / "gone.git")  # the remote cannot be asked: the clone the cache holds, said
    assert sources.locate([spec], "", cache) == ([tree], {})
    assert f"Warning: could not ask {bare} where v2.0.0 points now" in printed.getvalue()
    assert f"using the cached clone at {moved[:12]}." in printed.getvalue()
