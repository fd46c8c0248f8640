"""Vendor patches ([dev] patches, --patch SOURCE=PATH): applied in order by the in-image script
to a real tree, refused before any build work where the host has the tree and one does not apply,
their digests in the input hash; bad entries refused naming what is accepted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_invoke
from torchbake.core.errors import ConfigurationError
from torchbake.inputs import patches

SOURCE = "int answer(void) { return 41; }\n"
FIRST = """--- a/csrc/answer.c
+++ b/csrc/answer.c
@@ -1 +1 @@
-int answer(void) { return 41; }
+int answer(void) { return 42; }
"""
SECOND = """--- a/csrc/answer.c
+++ b/csrc/answer.c
@@ -1 +1,2 @@
 int answer(void) { return 42; }
+int vendor(void) { return 1; }
"""


def tree(folder: Path) -> Path:
    (folder / "csrc").mkdir(parents=True)
    (folder / "csrc" / "answer.c").write_text(SOURCE)
    return folder


def patch_folder(folder: Path, *texts: str) -> Path:
    """A vendor's patch folder: applied by name (the second builds on the first)."""
    folder.mkdir(parents=True)
    for index, text in enumerate(texts):
        (folder / f"{index:04d}-vendor.patch").write_text(text)
    return folder


def test_the_script_applies_each_sources_patches_in_order_before_it_compiles(tmp_path):
    """docker/common/apply_patches.sh as the dev image's compile steps run it: the context's
    patches/<source>/ (staged in order) applied to the tree; a tree without patches untouched."""
    staged = tmp_path / "context" / "patches"
    found = patches.read([f"pytorch={patch_folder(tmp_path / 'vendor', FIRST, SECOND)}"])
    patches.stage(found, staged)
    assert sorted(p.name for p in staged.iterdir()) == ["audio", "extension", "pytorch", "vision"]
    assert sorted(p.name for p in (staged / "pytorch").iterdir()) == ["0001-0000-vendor.patch", "0002-0001-vendor.patch"]
    src = tree(tmp_path / "pytorch")
    script = ROOT / "docker/common/apply_patches.sh"
    run = subprocess.run(["bash", "-c", f"bash {script} pytorch {src} && bash {script} vision {src}"],
                         capture_output=True, text=True, env={**os.environ, "TORCHBAKE_PATCHES": str(staged)})
    assert run.returncode == 0, run.stdout + run.stderr
    assert (src / "csrc" / "answer.c").read_text() == "int answer(void) { return 42; }\nint vendor(void) { return 1; }\n"
    assert run.stdout.splitlines() == ["torchbake: applied 0000-vendor.patch to pytorch",
                                       "torchbake: applied 0001-vendor.patch to pytorch"]


def test_a_patch_that_does_not_apply_is_refused_before_any_work_naming_it_the_file_and_the_commit(tmp_path):
    vendor = patch_folder(tmp_path / "vendor", SECOND)  # made against a tree where the first was applied
    src = tree(tmp_path / "pytorch")
    found = patches.read([f"pytorch={vendor}"])
    with pytest.raises(ConfigurationError) as refused:
        patches.check(found, {"pytorch": (src, "c0ffee" * 7)})
    said = str(refused.value)
    assert said.startswith(f"[dev] patches: {vendor / '0000-vendor.patch'} does not apply to pytorch at c0ffeec0ffee")
    assert "csrc/answer.c" in said and "Nothing was built" in said
    assert (src / "csrc" / "answer.c").read_text() == SOURCE  # the host's tree is never changed
    patches.check(patches.read([f"pytorch={patch_folder(tmp_path / 'ok', FIRST, SECOND)}"]), {"pytorch": (src, "c" * 40)})
    assert (src / "csrc" / "answer.c").read_text() == SOURCE


def test_a_patchs_digest_is_its_content(tmp_path):
    """What the input hash, the label and the record hold of a patch: its content's digest."""
    one, two = tmp_path / "a.patch", tmp_path / "b.patch"
    one.write_text(FIRST)
    two.write_text(FIRST)
    assert patches.read([f"extension={one}"])[0].sha256 == patches.read([f"extension={two}"])[0].sha256
    two.write_text(SECOND)
    assert patches.read([f"extension={one}"])[0].sha256 != patches.read([f"extension={two}"])[0].sha256
    assert patches.by_source(patches.read([f"extension={two}"])) == {
        "extension": [{"name": "b.patch", "sha256": patches.read([f"extension={two}"])[0].sha256}]}


@pytest.mark.parametrize(("entry", "says"), [
    ("kernel=patches/", "expected SOURCE=PATH with SOURCE one of pytorch, vision, audio, extension"),
    ("pytorch", "expected SOURCE=PATH"),
    ("pytorch=/no/such/folder", "no such file; expected a patch file or a folder of them"),
])
def test_a_bad_patch_entry_is_refused_before_any_work(tmp_path, entry, says):
    result = run_invoke("build", "--patch", entry, "--dry-run", "--docker", "/usr/bin/docker")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"dev.patches = ['{entry}'] (from command line) is invalid: {says}" in result.stderr, result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = run_invoke("build", "--patch", f"pytorch={empty}", "--dry-run", "--docker", "/usr/bin/docker")
    assert refused.returncode == 2 and "the folder holds no .patch or .diff file" in refused.stderr


def test_the_host_check_reads_patch_headers_as_git_apply_does(tmp_path):
    """A `diff -ru pytorch.orig/ pytorch/` patch (-p1 strips any first folder), a name with a space,
    and a rename: the host applies what the build would."""
    src = tree(tmp_path / "pytorch")
    (src / "sp ace.txt").write_text("a\n")
    (src / "old.txt").write_text("a\n")
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "1.patch").write_text("--- pytorch.orig/old.txt\n+++ pytorch/old.txt\n@@ -1 +1 @@\n-a\n+b\n")
    (vendor / "2.patch").write_text("--- a/sp ace.txt\t2020-01-01\n+++ b/sp ace.txt\t2020-01-01\n@@ -1 +1 @@\n-a\n+b\n")
    (vendor / "3.patch").write_text("diff --git a/csrc/answer.c b/csrc/renamed.c\nsimilarity index 100%\n"
                                    "rename from csrc/answer.c\nrename to csrc/renamed.c\n")
    patches.check(patches.read([f"pytorch={vendor}"]), {"pytorch": (src, "c" * 40)})  # no refusal
    assert (src / "old.txt").read_text() == "a\n"


def test_patches_that_cannot_be_read_or_applied_are_refused_before_any_work(tmp_path):
    fifo = tmp_path / "fifo.patch"
    os.mkfifo(fifo)
    read_forever = run_invoke("build", "--patch", f"pytorch={fifo}", "--dry-run", "--docker", "/usr/bin/docker")
    assert read_forever.returncode == 2 and f"{fifo} is not a regular file" in read_forever.stderr, read_forever.stderr
    one = tmp_path / "one.patch"
    one.write_text(FIRST)
    never = run_invoke("build", "--patch", f"extension={one}", "--dry-run", "--docker", "/usr/bin/docker")
    assert never.returncode == 2 and "the cpu profile builds no vendor extension" in never.stderr, never.stderr
