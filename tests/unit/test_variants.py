"""The variant registry: found from the modules of torchbake/variants, and a new variant is its
module, its Dockerfile and its [naming] tag, nothing else."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

from tests.conftest import ROOT, run_invoke
from torchbake.checks import verify
from torchbake.core.errors import ConfigurationError
from torchbake.planning import config
from torchbake.variants import VARIANTS, _in_build_order


def test_the_registry_is_every_variant_module_in_build_order():
    assert list(VARIANTS) == ["base", "dev", "release"]
    for name, variant in VARIANTS.items():
        assert name == variant.name and set(verify.CHECKS) >= variant.verifies, name
        assert variant.built_from is None or variant.built_from in VARIANTS, name
    fake = {name: dataclasses.replace(VARIANTS["release"], name=name, built_from=built_from) for name, built_from in
            {"a": "c", "b": None, "c": "b"}.items()}
    assert list(_in_build_order(fake)) == ["b", "c", "a"]


def test_build_variant_takes_the_variants_that_build_as_themselves():
    assert config.resolve([], {}, {"build.variant": "release"}).values["build.variant"] == "release"
    try:
        config.resolve([], {}, {"build.variant": "base"})
    except ConfigurationError as exc:
        assert "build.variant = 'base' (from command line) is invalid: expected one of: dev, release" in str(exc)
    else:
        raise AssertionError("build.variant = base was accepted")


NOTEBOOK = '''"""Notebook images: a release image with a notebook on top."""

from __future__ import annotations

import dataclasses

from . import release
from .common import Variant, template_of


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotebookPlan(release.ReleasePlan):
    variant = "notebook"
    decided_like = ("release",)


def plan(settings, **given):
    made = release.plan(settings, **given)
    fields = {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    return NotebookPlan(**{**fields, "dockerfile_template": template_of(settings, NotebookPlan.variant)})


VARIANT = Variant(name=NotebookPlan.variant, build_variant="notebook", built_from="release", from_option="image.base",
                  verifies=frozenset({"torch"}), lock_command="", plan=plan)
'''


def test_a_new_variant_is_its_module_its_dockerfile_and_its_naming_tag(tmp_path):
    """The three files of a made-up "notebook" variant (FROM the release image) in a copy of the
    project: build --dry-run plans it FROM the image the release variant names, show-config derives
    its names, build-all puts its cells after release's, in one shard. No other file changes."""
    tracked = subprocess.run(["git", "ls-files", "torchbake", "configs", "docker", "tasks.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "torchbake/variants/notebook.py").write_text(NOTEBOOK)
    dockerfile = (ROOT / "docker/ubuntu/dockerfile.release").read_text()
    (tmp_path / "docker/ubuntu/dockerfile.notebook").write_text(dockerfile + "\nRUN echo notebook\n")
    settings_file = tmp_path / "torchbake/configuration/settings.py"
    text = settings_file.read_text()
    anchor = "    release_tag: str = option("
    assert anchor in text
    settings_file.write_text(text.replace(anchor, '    notebook_tag: str = option("{torch}-py{python}-notebook",'
                                                  ' decides=(), help="Tag of a notebook image")\n' + anchor))
    (tmp_path / "notebook.toml").write_text('[build]\nvariant = "notebook"\n')
    env = {"PYTHONPATH": str(tmp_path)}

    built = run_invoke("build", "--config", "notebook.toml", "--dry-run", "--docker", "/usr/bin/docker",
                       cwd=tmp_path, root=tmp_path, env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "Plan for torchbake/pytorch-cpu:2.13.0-py3.11-notebook (notebook, profile cpu)" in built.stdout
    assert "base image      torchbake/pytorch-cpu:2.13.0-py3.11" in built.stdout
    assert "dockerfile.notebook" in built.stdout

    shown = run_invoke("show-config", "--variant", "notebook", cwd=tmp_path, root=tmp_path, env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "derived from [naming]: the image build-release makes" in shown.stdout

    matrix = tmp_path / "matrix.toml"
    matrix.write_text('[matrix]\npythons = ["3.11"]\nvariants = ["notebook", "release"]\nprofiles = ["cpu"]\n')
    planned = run_invoke("build-all", "--config", str(matrix), "--emit-matrix", "github", cwd=tmp_path, root=tmp_path,
                         env=env)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert '"cells": "cpu-release-py311 cpu-notebook-py311"' in planned.stdout  # one shard: notebook needs release
