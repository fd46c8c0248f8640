"""Dev images end to end: build-base from real git repositories at pinned tags, a dev build that
compiles PyTorch's stand-in source as PyTorch builds its own (CMake over ninja, a bundled
third-party project declaring cmake_minimum_required 3.1: it configures with the CMake of its
tag's day, which the base resolves) and a vendor C extension whose setup.py imports the installed
(stand-in) torch (private, credentials as a BuildKit secret), ccache across builds, and the bad
inputs of source handling. (ccache's statistics beside another build and its remote storage on a
fresh engine: test_dev_cache.)"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.conftest import run_invoke

from .conftest import CANARY, SUPPLIER
from .fixture_repos import dev_profile, write_extension
from .helpers import (
    NTIA_CHECKER,
    TINY_TORCH_VERSION,
    assert_sbom_lists_what_pip_freeze_lists,
    docker,
    engine_state,
    judged_by_the_standards,
    labels,
    recorded_compiles,
    saved_contents,
    sboms,
)


@pytest.fixture(scope="module")
def cmake_config(dev_config, repos, tiny_torch):
    """dev_config's profile with PyTorch's source as PyTorch builds it (the pytorch-cmake fixture,
    committed on PyTorch 2.0's day) and cmake and ninja among the base's build requirements,
    unpinned, as a team writes them: the base resolves them as of the tag's day."""
    config, credentials = dev_config
    cmake = config.with_name("fixture-cmake.toml")
    cmake.write_text(dev_profile(repos["url"], supplier=SUPPLIER, torch=str(tiny_torch), pytorch="pytorch-cmake",
                                 build_tools=("cmake", "ninja")))
    return cmake, credentials


@pytest.fixture(scope="module")
def dev_base(run_id, base_image, tb_env, cmake_config):
    """The base image, locked first (`invoke lock --base` in the team's folder) and built --locked."""
    config, _ = cmake_config
    name = f"torchbake-test/dev-base:{run_id}"
    args = ("--config", str(config), "--name", "torchbake-test/dev-base", "--tag", run_id, "--sys", base_image,
            "--python", "3.11")
    locked = run_invoke("lock", "--base", *args, cwd=config.parent, env=tb_env)
    assert locked.returncode == 0, locked.stdout + locked.stderr
    result = run_invoke("build-base", *args, "--locked", cwd=config.parent, env=tb_env)
    yield name, result
    docker("image", "rm", "--force", name, check=False)


# A vendor's patch to PyTorch's tree (as torch_musa keeps them): a module the tree lacks, applied
# before the tree compiles
VENDOR_PATCH = """--- /dev/null
+++ b/fixture_pytorch/vendor.py
@@ -0,0 +1 @@
+PATCHED_BY = "the vendor"
"""


@pytest.fixture(scope="module")
def dev_image(run_id, dev_base, tb_env, cmake_config):
    config, credentials = cmake_config
    name = f"torchbake-test/dev:{run_id}"
    vendor = config.parent / "vendor-patches"
    vendor.mkdir(exist_ok=True)
    (vendor / "0001-vendor-module.patch").write_text(VENDOR_PATCH)
    result = run_invoke("build", "--config", str(config), "--name", "torchbake-test/dev", "--tag", run_id,
                        "--base-img", dev_base[0], "-c", str(credentials), "--patch", f"pytorch={vendor}", env=tb_env)
    yield name, result
    docker("image", "rm", "--force", name, check=False)


def test_build_base_holds_the_sources_at_their_tags(dev_base, repos, cmake_config, run_id):
    name, result = dev_base
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert re.search(r"pytorch source\s*│\s*pass", output)
    found = labels(name)
    assert found["torchbake.variant"] == "base"
    for source, repository in (("pytorch", "pytorch-cmake"), ("vision", "vision"), ("audio", "audio")):
        assert found[f"torchbake.source.{source}.commit"] == repos["commits"][repository]
    assert found["torchbake.source.pytorch.tag"] == "v2.0.0"
    probe = docker("run", "--rm", name, "bash", "-c",
                   "cat /home/pytorch/third_party/sub/include/fixture_sub.h; ls -a /home/pytorch;"
                   " id dev; getent group render video").stdout
    assert "#define FIXTURE_SUB 7" in probe  # the submodule came along
    assert ".git" not in probe.split()  # .git left out (no --keep-git)
    assert "uid=1000(dev)" in probe and "render:x:109:" in probe and "video:x:44:" in probe
    # its closure is its lock's: the wheels (no resolver ran) and the Debian packages at their versions
    lock = cmake_config[0].parent / "locks" / f"pylock.torchbake-test-dev-base-{run_id}-linux-amd64.toml"
    assert found["torchbake.lock"] == f"{lock.name} sha256:{hashlib.sha256(lock.read_bytes()).hexdigest()}"
    assert "no resolver ran" in output
    debs = tomllib.loads(lock.read_text())["tool"]["torchbake"]["debs"]
    installed = dict(line.split() for line in docker("run", "--rm", "--entrypoint", "dpkg-query", name, "-W",
                                                     "-f", "${Package} ${Version}\n").stdout.splitlines())
    assert "build-essential" in debs and {package: installed.get(package) for package in debs} == debs
    # the build tools of the tag's day: cmake and ninja, unpinned in the profile, resolved no newer
    # than PyTorch 2.0's day (the tag's commit: every wheel the lock names was published by then);
    # today's CMake (4.x) refuses the tree's third_party
    locked = tomllib.loads(lock.read_text())
    assert locked["tool"]["torchbake"]["as_of"] == "tag"
    published = {p["name"]: max(w["upload-time"] for w in p["wheels"]).date().isoformat()
                 for p in locked["packages"] if "upload-time" in (p.get("wheels") or [{}])[0]}
    assert {"cmake", "ninja", "setuptools"} <= set(published) and max(published.values()) <= "2023-03-15", published
    version = docker("run", "--rm", name, "cmake", "--version").stdout.split()[2]
    assert version.startswith("3."), version


def test_dev_build_compiles_torch_stand_in_and_extension(dev_image):
    name, result = dev_image
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    for check in ("torch from source", "torchbake_fixture_ext imports", "torch pinned", "pip check"):
        assert re.search(rf"{check}\s*│\s*pass", output), check
    # the extension's setup.py imports torch: only a --no-build-isolation build can run it
    assert "--no-build-isolation" in docker("run", "--rm", name, "cat", "/opt/torchbake/common/build_source.sh").stdout
    run = docker("run", "--rm", name, "python", "-c",
                 "import torch, torchbake_fixture_ext as e, fixture_pytorch as p, fixture_apex;"
                 " from fixture_pytorch.vendor import PATCHED_BY;"
                 " print(torch.__version__, e.plus_one(1), p.answer(), PATCHED_BY.replace(' ', '-'))").stdout
    assert run.split() == [TINY_TORCH_VERSION, "2.0", "42", "the-vendor"]  # the vendor's patch, applied and built
    assert "torchbake: applied 0001-vendor-module.patch to pytorch" in output
    assert json.loads(labels(name)["torchbake.patches"])["pytorch"][0]["name"] == "0001-vendor-module.patch"
    constraints = docker("run", "--rm", name, "cat", "/etc/torchbake/constraints.txt").stdout
    assert f"torch=={TINY_TORCH_VERSION}" in constraints and "torchbake-fixture-ext==1.5.1" in constraints
    assert "fixture-apex==24.4.1" in constraints
    found = labels(name)
    assert found["torchbake.variant"] == "dev"
    assert found["torchbake.extension"] == "torchbake-fixture-ext==1.5.1"
    assert found["torchbake.torch-version"] == TINY_TORCH_VERSION
    # PyTorch's tree as PyTorch builds it: CMake configured it (its bundled third-party project's
    # cmake_minimum_required 3.1 passed, with the CMake of its day) and ninja's [N/16] counted
    # (12 units, the module, the bundled library, two links); the step's figures said and kept
    assert "-- Configuring done" in output and re.search(r"\[16/16\] Linking C shared module _core\.so", output)
    assert re.search(r"torchbake: compiled pytorch: 16/16 objects \(100 %\), [\d,]+ a minute", output), output[-3000:]
    progress = recorded_compiles(result.stdout, "compile_progress")
    assert progress["pytorch"]["objects"] == progress["pytorch"]["total"] == 16, progress
    # uv and sccache reach the engine as OCI layouts by digest (test_reproducible: not in the context)
    manifest = json.loads(Path(re.search(r"manifest: (\S+)\)", result.stdout).group(1)).read_text())
    log = Path(manifest["log"]).read_text()
    assert "[context torchbake-uv] OCI load from client" in log and "[context torchbake-sccache] OCI load" in log


def test_a_rebuild_after_one_changed_file_is_served_by_ccache_and_its_slim_image_has_no_compilers_or_sources(
        dev_image, dev_base, tb_env, cmake_config, run_id, repos, tmp_path):
    """One file of the extension changes; the --slim build compiles it again through ccache (hits
    from the first build) and makes the dev image and its slim runtime image, each with SBOMs.
    (A --no-cache build of a dev image empties the engine's cache mount: no test makes one on this
    engine. The tests below read the rebuilt image.)"""
    name, first = dev_image
    assert first.returncode == 0
    config, credentials = cmake_config
    # this run's own change, in the code gcc sees (a comment would be gone after preprocessing, and
    # ccache would find the object an earlier run compiled; the engine, every step cached)
    write_extension(repos["root"] / "work", repos["root"] / "srv", "dev1.5.1", f'(void)"{run_id}"; return 2;')
    result = run_invoke("build", "--config", str(config), "--name", "torchbake-test/dev", "--tag", run_id,
                        "--base-img", dev_base[0], "-c", str(credentials), "--slim",
                        "--patch", f"pytorch={config.parent / 'vendor-patches'}", env=tb_env)
    slim = f"{name}-slim"
    try:
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-5000:]
        section = output[output.rindex("ccache statistics for extension"):]
        hits = re.search(r"Hits:\s+(\d+)", section)
        assert hits and int(hits.group(1)) >= 1, section[:1500]
        # b.c compiled again, a.c from ccache: the build's own count of its extension's compiles
        assert re.search(r"compile-cache role=extension compiled=1 local_hits=1 ", output), section[:1500]
        assert re.search(rf"Sizes: dev {re.escape(name)} [\d.]+ [kMG]?B, slim {re.escape(slim)} [\d.]+ [kMG]?B", output.replace("\n", " "))
        changed = "python -c 'import torchbake_fixture_ext as e; print(e.plus_one(1))'"
        assert docker("run", "--rm", name, "bash", "-c", changed).stdout.strip() == "3.0"  # the changed file's
        probe = docker("run", "--rm", slim, "bash", "-c", f"command -v gcc cc g++ || echo no-compiler; ls /home; {changed}").stdout
        assert "no-compiler" in probe and "pytorch" not in probe
        assert probe.split()[-1] == "3.0"
        sizes = [int(docker("image", "inspect", "--format", "{{.Size}}", ref).stdout) for ref in (name, slim)]
        assert sizes[1] < sizes[0]
        assert labels(slim)["torchbake.slim"] == "true"
        # both images have SBOMs, valid by the formats' own validators: the dev image lists its source
        # trees at their commits, and the slim one what its runtime stage kept (no compiler package)
        for image, folder in ((name, tmp_path / "dev"), (slim, tmp_path / "slim")):
            folder.mkdir()
            found = sboms(image, tb_env, folder, validate=image == name)  # the formats' validators: once
            assert_sbom_lists_what_pip_freeze_lists(image, found["cyclonedx"])
            debs = {c["name"] for c in found["cyclonedx"]["components"] if c["purl"].startswith("pkg:deb/")}
            assert "libc6" in debs and ("gcc" in debs) == (image == name), image
            sources = {c["name"]: c["version"] for c in found["cyclonedx"]["components"]
                       if {"name": "torchbake:git-tag", "value": "v2.0.0"} in c.get("properties", [])}
            assert sources == {"pytorch": repos["commits"]["pytorch-cmake"]}, sources
            if image == slim:  # the standards judge what the SBOM writer makes: the dev image's suffice
                continue
            # NTIA's minimum elements, as the checker nobody here wrote judges them, for a dev image too
            # (SPDX 2.3 and 3); FSCT3-min and BSI as far as the packages state their licences
            (folder / "image.spdx.json").write_text(json.dumps(found["spdx"]))
            ntia = subprocess.run([NTIA_CHECKER, "--comply", "ntia", str(folder / "image.spdx.json")],
                                  capture_output=True, text=True, timeout=120)
            assert ntia.returncode == 0 and "Conformant: True" in ntia.stdout, (image, ntia.stdout + ntia.stderr)
            judged = judged_by_the_standards(found["spdx3"], folder)
            assert all(judged["ntia"].values()), (image, judged["ntia"])
            assert judged["fsct3-min"]["SBOM generation context (SBOM type) provided?"], image
            assert judged["bsi"]["Creator of the SBOM"] and judged["bsi"]["Component Creators"], (image, judged["bsi"])
    finally:
        docker("image", "rm", "--force", slim, check=False)


def test_the_dev_images_provenance_is_of_its_build_from_the_dev_base_not_of_the_relabelling(dev_image, dev_base, tb_env):
    """The dev build's provenance describes the build FROM the dev base (its options, its sources),
    about the final image, and not the FROM-only build that adds the built versions' labels."""
    name, result = dev_image
    assert result.returncode == 0
    statement = run_invoke("provenance", name, env=tb_env)
    assert statement.returncode == 0, statement.stderr
    document = json.loads(statement.stdout)
    image_id = docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
    assert document["subject"][0]["digest"] == {"sha256": image_id.split(":")[1]}
    definition = document["predicate"]["buildDefinition"]
    assert definition["buildType"] == "urn:torchbake:build:dev:v1"
    base = next(d for d in definition["resolvedDependencies"] if d["name"] == "base image")
    base_id = docker("image", "inspect", "--format", "{{.Id}}", dev_base[0]).stdout.strip()
    # the dev base (never pushed: its config's digest, said to be one), not the image before relabelling
    assert base["digest"] == {"sha256": base_id.split(":")[1]} and "dev-base" in base["uri"], base
    assert any(key.startswith("dev.") for key in definition["externalParameters"]), definition["externalParameters"]
    assert any(d["name"].startswith("source ") for d in definition["resolvedDependencies"])


def test_credentials_are_used_but_found_nowhere(dev_image, repos, tb_env, cache_dir):
    name, result = dev_image
    assert result.returncode == 0
    assert any(h.startswith("Basic ") for h in repos["seen_auth"])  # the private repo asked, and got them
    assert CANARY not in result.stdout + result.stderr
    assert CANARY.encode() not in saved_contents(name)
    assert CANARY not in docker("history", "--no-trunc", name).stdout
    assert CANARY not in docker("image", "inspect", name).stdout
    assert CANARY not in docker("run", "--rm", name, "bash", "-c", "cat /home/extension/.git/config; env").stdout
    for log in (cache_dir / "logs").glob("*.log"):
        assert CANARY not in log.read_text(errors="replace"), log
    written = [p for p in (cache_dir / "logs").glob("*.json") if p.name.endswith((".spdx.json", ".spdx3.json",
                                                                                   ".cdx.json", ".provenance.json",
                                                                                   ".manifest.json"))]
    assert any(p.name.endswith(".provenance.json") for p in written)  # the dev build's SBOMs and provenance
    for document in written:
        assert CANARY not in document.read_text(), document


def test_source_bad_inputs_fail_early(dev_base, repos, tb_env, dev_config, tmp_path, run_id):
    config, credentials = dev_config
    # A source root whose pytorch clone is at another tag.
    root = tmp_path / "src"
    root.mkdir()
    subprocess.run(["git", "clone", "-q", "--branch", "v2.0.0", f"{repos['url']}/pytorch.git", str(root / "pytorch")],
                   check=True, capture_output=True)
    subprocess.run(["git", "-C", str(root / "pytorch"), "tag", "v9.9"], check=True)
    subprocess.run(["git", "-C", str(root / "pytorch"), "checkout", "-q", "-b", "work"], check=True)
    subprocess.run(["git", "-C", str(root / "pytorch"), "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-q",
                    "--allow-empty", "-m", "local work"], check=True)
    before_head = subprocess.run(["git", "-C", str(root / "pytorch"), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    unreachable = tmp_path / "unreachable.toml"
    unreachable.write_text('[sources]\npytorch_repo = "http://127.0.0.1:9/nope.git"\n')
    base = ["build-base", "--config", str(config), "--name", "torchbake-test/bad", "--sys", dev_base[0]]
    cases = [
        ([*base, "--source-root", str(root), "--pytorch-tag", "v9.9"], f"{root / 'pytorch'} (source root) is at work, but v9.9 is wanted."),
        ([*base, "--source-root", str(root), "--pytorch-tag", "v0.0.1"], "has no tag 'v0.0.1'"),
        ([*base, "--config", str(unreachable)], "Cannot reach http://127.0.0.1:9/nope.git (sources.pytorch_repo)"),
        ([*base, "--vision-tag", "v0.0.0-missing"], "has no tag or branch 'v0.0.0-missing' (sources.vision_tag)"),
        (["build", "--config", str(config), "--name", "torchbake-test/bad", "--base-img", dev_base[0],
          "-c", str(tmp_path / "no-credentials")], "dev.git_credential_file = "),
        (["build", "--config", str(config), "--name", "torchbake-test/bad", "--base-img", dev_base[0],
          "-c", str(credentials), "--python", "3.10"], "Python 3.10 was requested, but the base image"),
        (["build", "--config", str(config), "--name", "torchbake-test/bad", "--base-img", dev_base[0],
          "-c", str(credentials), "--torch-musa-tag", "no-such-ref"], "has no tag or branch 'no-such-ref' (sources.extension_tag)"),
        (["build", "--config", str(config), "--name", "torchbake-test/bad", "--base-img", "torchbake-test/debian:none"],
         "does not exist on this engine. Make it with `invoke build-base --name torchbake-test/debian --tag none`"),
    ]
    names = [word for args, _ in cases for word in args]
    before = engine_state(names)
    failures = []
    for args, message in cases:
        result = run_invoke(*args, env=tb_env)
        output = result.stdout + result.stderr
        if (result.returncode == 0 or "Traceback" in output or message not in output or "docker build" in output
                or "Preparing the build context" in output):
            failures.append(f"{args}: rc={result.returncode}\n{output[-1500:]}")
    assert not failures, "\n\n".join(failures)
    assert engine_state(names) == before
    after_head = subprocess.run(["git", "-C", str(root / "pytorch"), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert after_head == before_head  # the user's clone was not touched
