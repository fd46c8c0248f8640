"""Release images end to end on a real engine: build, verify, layers, labels, derived images."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_invoke
from torchbake.core.output import human_size
from torchbake.supply_chain import attestations

from .helpers import (
    NTIA_CHECKER,
    assert_sbom_lists_what_pip_freeze_lists,
    docker,
    dpkg_installed,
    dpkg_status,
    engine_state,
    http_server,
    judged_by_the_standards,
    labels,
    layer_file_names,
    listing,
    make_wheel,
    new_layer_bytes,
    sboms,
    sha256_of,
    torch_layer,
)


def test_cpu_release_image_builds_and_verifies(cpu_image):
    name, result = cpu_image
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "Traceback" not in output
    assert re.search(r"\S+/docker buildx build --output=type=docker,compression=zstd,oci-mediatypes=true,force-compression=true --provenance=false --progress=plain", output)  # whichever client has buildx
    for check in ("python version", "torch imports", "torch version", "pip check", "torch pinned"):
        assert re.search(rf"{check}\s*│\s*pass", output), check
    assert f"Built {name}" in output
    log = re.search(r"\(log: (\S+?\.log)\)", output.replace("\n", "")).group(1)
    # the whole build went to the log (steps may be cached when an earlier test built the same inputs)
    candidate = re.search(r"naming to docker\.io/torchbake-test/pytorch-cpu:(torchbake-candidate-[0-9a-f]+)",
                          Path(log).read_text())
    assert candidate, "the build did not name its candidate"
    # the candidate tag is gone once verification passed (other tests' candidates under this NAME are theirs)
    tags = listing("images", "--format", "{{.Tag}}", "torchbake-test/pytorch-cpu").split()
    assert name.split(":")[1] in tags and candidate.group(1) not in tags


def test_the_cpu_images_sboms_are_valid_and_list_every_package_with_its_wheels_digest(cpu_image, cpu_env, tmp_path):
    name, result = cpu_image
    assert result.returncode == 0
    found = sboms(name, cpu_env, tmp_path)  # the build's own records, in the run's cache of the image
    # ... and what they were made with, in its manifest: a push with the same [sbom] options reads them (test_publishing)
    manifest = json.loads(Path(re.search(r"manifest: (\S+)\)", result.stdout).group(1)).read_text())
    assert manifest[attestations.MADE_WITH] == {name: attestations.sboms_made_with(cpu_env["TORCHBAKE_SBOM_SUPPLIER"])}
    wheels = json.loads(labels(name)["torchbake.inputs"])
    torch_sha = next(sha for file_name, sha in wheels.items() if file_name.startswith("torch-2.13.0+cpu-"))
    cdx = {c["purl"].split("?")[0]: c for c in found["cyclonedx"]["components"]}
    assert cdx["pkg:pypi/torch@2.13.0%2Bcpu"]["hashes"] == [{"alg": "SHA-256", "content": torch_sha}]
    debs = {c["name"]: c["version"] for c in found["cyclonedx"]["components"] if c["purl"].startswith("pkg:deb/debian/")}
    assert debs == dpkg_installed(name)  # every dpkg package, none invented
    assert "python3.11" in debs and "libc6" in debs
    spdx = {p["name"]: p for p in found["spdx"]["packages"]}
    assert spdx["torch"]["versionInfo"] == "2.13.0+cpu"
    assert spdx["torch"]["checksums"] == [{"algorithm": "SHA256", "checksumValue": torch_sha}]
    assert_sbom_lists_what_pip_freeze_lists(name, found["cyclonedx"])
    # NTIA's minimum elements as a checker nobody here wrote judges them, on SPDX 2.3 and SPDX 3; CISA's
    # FSCT3-min (the SBOM type is SPDX 3's) and BSI TR-03183-2 but for what cannot be known, each
    # entry saying why: the licences and copyrights of the Rust crates inside uv, which
    # cargo-auditable does not record, and a distribution file for what no single file stands for
    # (the image and its base, OCI images; the crates, compiled into uv)
    spdx_file = tmp_path / "image.spdx.json"
    spdx_file.write_text(json.dumps(found["spdx"]))
    ntia = subprocess.run([NTIA_CHECKER, "--comply", "ntia", str(spdx_file)], capture_output=True, text=True, timeout=120)
    unsupplied = [(p["name"], p.get("versionInfo"), p.get("comment")) for p in found["spdx"]["packages"]
                  if p.get("supplier", "NOASSERTION") == "NOASSERTION"]
    assert "Conformant: True" in ntia.stdout and ntia.returncode == 0, (ntia.stdout + ntia.stderr, unsupplied[:10])
    judged = judged_by_the_standards(found["spdx3"], tmp_path)
    assert all(judged["ntia"].values()), judged["ntia"]
    assert [row for row, ok in judged["fsct3-min"].items() if not ok] == [
        "All component concluded license provided?", "All component copyright notice provided?"], judged["fsct3-min"]
    assert judged["fsct3-min"]["SBOM generation context (SBOM type) provided?"]
    assert [row for row, ok in judged["bsi"].items() if not ok and "(" not in row] == [
        "Distribution Filenames", "Distribution Licenses"], judged["bsi"]
    graph = found["spdx3"]["@graph"]
    linked = {r["from"] for r in graph if r["type"] == "Relationship" and r["relationshipType"] == "hasDistributionArtifact"}
    unfiled = [p for p in graph if p["type"] == "software_Package" and p["spdxId"] not in linked]
    assert unfiled and all("no distribution file: " in p.get("comment", "") for p in unfiled)
    assert {p["software_primaryPurpose"] for p in unfiled} == {"container", "library"}  # the images, the crates
    files = {f["name"]: {h["algorithm"] for h in f["verifiedUsing"]} for f in graph if f["type"] == "software_File"}
    assert files[next(f for f in wheels if f.startswith("torch-"))] == {"sha256", "sha512"}
    assert all(files[f"{deb}_{version.split(':')[-1]}_{arch}.deb"] == {"sha256", "sha512"}  # every .deb, base's too
               for deb, fields in dpkg_status(name).items()
               for version, arch in [(fields["Version"], fields["Architecture"])])
    unstated = [p for p in found["spdx"]["packages"]
                if p["licenseConcluded"] == "NOASSERTION" or p["copyrightText"] == "NOASSERTION"]
    reasons = ("cargo-auditable", "metadata states no licence", "state no copyright line", "no copyright file")
    assert unstated and not [p["name"] for p in unstated if not any(r in p.get("licenseComments", "") for r in reasons)]
    assert sum("cargo-auditable" in p["licenseComments"] for p in unstated) >= 400  # uv's crates, the bulk of them
    assert "disconnected" not in ntia.stdout + ntia.stderr  # every package reached from the image
    # syft (nobody here wrote it) finds no Debian package, Python distribution or Rust crate that the SBOM lacks;
    # with its default catalogers, not its listing of files (the digests of every file a package owns: 4 to 6 s
    # of its 28 to 34 s of CPU on this 1.5 GB image; the same 678 packages found without it, 2026-11-30)
    scanned = subprocess.run([str(Path(sys.executable).with_name("syft")), f"docker:{name}", "-o", "syft-json", "-q"],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false", "SYFT_FILE_METADATA_SELECTION": "none"})
    assert scanned.returncode == 0, scanned.stderr[-2000:]
    kinds = {"deb": "pkg:deb/", "python": "pkg:pypi/", "rust-crate": "pkg:cargo/"}
    seen = {(a["type"], re.sub(r"[-_.]+", "-", a["name"]).lower(), a["version"])
            for a in json.loads(scanned.stdout)["artifacts"] if a["type"] in kinds}
    ours = {(kind, re.sub(r"[-_.]+", "-", c["name"]).lower(), c["version"]) for c in found["cyclonedx"]["components"]
            for kind, prefix in kinds.items() if c.get("purl", "").startswith(prefix)}
    assert seen and seen <= ours, sorted(seen - ours)[:20]
    assert {kind for kind, _, _ in seen} == set(kinds)  # uv's crates among them
    ids = {p["SPDXID"]: p["name"] for p in found["spdx"]["packages"]}
    depends = {(ids[r["spdxElementId"]], ids[r["relatedSpdxElement"]]) for r in found["spdx"]["relationships"]
               if r["relationshipType"] == "DEPENDS_ON"}
    status = dpkg_status(name)
    for package, fields in status.items():  # each dependency's first alternative, as dpkg has it
        relations = ", ".join(filter(None, (fields.get("Pre-Depends"), fields.get("Depends"))))
        wanted = {part.split("|")[0].split("(")[0].split(":")[0].strip() for part in relations.split(",") if part.strip()}
        assert {b for a, b in depends if a == package} == wanted & set(status), package
        assert spdx[package]["supplier"].split(": ", 1)[1] == fields["Maintainer"].replace(" <", " (").replace(">", ")")
    assert ("python3.11-minimal", "libc6") in depends and ("torch", "sympy") in depends
    assert spdx[name.split(":")[0]]["supplier"] == "Organization: ML Platform (ml-platform@example.com)"
    assert "Organization: ML Platform (ml-platform@example.com)" in found["spdx"]["creationInfo"]["creators"]

    statement = run_invoke("provenance", name, env=cpu_env)
    assert statement.returncode == 0, statement.stderr
    document = json.loads(statement.stdout)
    image_id = docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
    assert document["subject"] == [{"name": name, "digest": {"sha256": image_id.split(":")[1]}}]
    dependencies = {d["name"]: d for d in document["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert dependencies[next(f for f in wheels if f.startswith("torch-"))]["digest"] == {"sha256": torch_sha}
    assert dependencies["base image"]["digest"]["sha256"] == labels(name)["org.opencontainers.image.base.digest"][7:]
    assert set(document["predicate"]["runDetails"]["builder"]["version"]) == {"torchbake", "docker-client",
                                                                               "docker-engine"}
    # exact: every package URL parses (packageurl-python), every Debian package the build put on top of
    # the base is a dependency, and the parameters are the options that decide a release image only
    from packageurl import PackageURL

    uris = [d["uri"] for d in dependencies.values() if d.get("uri", "").startswith("pkg:")]
    assert uris and all(PackageURL.from_string(uri).to_string() == uri for uri in uris)
    base = labels(name)["org.opencontainers.image.base.name"]
    above = set(dpkg_installed(name).items()) - set(dpkg_installed(base).items())
    listed = {(d["name"].removeprefix("deb "), PackageURL.from_string(d["uri"]).version) for d in dependencies.values()
              if d["name"].startswith("deb ")}
    assert above and listed == above, (above ^ listed)
    # each with the .deb's digests and the URL apt fetched it from, as the image recorded them
    debs = [d for d in dependencies.values() if d["name"].startswith("deb ")]
    assert all(set(d["digest"]) == {"sha256", "sha512"} and d["downloadLocation"].startswith("http://")
               and d["downloadLocation"].endswith(".deb") for d in debs), debs[:3]
    parameters = document["predicate"]["buildDefinition"]["externalParameters"]
    assert not [key for key in parameters if key.startswith(("dev.", "sources.", "base."))], parameters


def test_no_layer_holds_a_wheel_from_the_wheelhouse(cpu_image, tmp_path):
    name, _ = cpu_image
    wheels = [n for n in layer_file_names(name, tmp_path) if n.endswith(".whl")]
    # Only Debian's own python3-venv support wheels (pip, setuptools) may be there.
    assert wheels and all(n.startswith("usr/share/python-wheels/") for n in wheels), wheels
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", name).stdout
    assert "torch-2.13.0" not in history and "COPY wheelhouse" not in history


def test_labels_record_versions_and_inputs(cpu_image):
    name, _ = cpu_image
    found = labels(name)
    assert found["torchbake.variant"] == "release"
    assert found["torchbake.profile"] == "cpu"
    assert found["torchbake.python"] == "3.11"
    assert found["torchbake.torch-version"] == "2.13.0+cpu"
    assert re.fullmatch(r"[0-9a-f]{64}", found["torchbake.input-hash"])
    inputs = json.loads(found["torchbake.inputs"])
    torch_wheels = [k for k in inputs if k.startswith("torch-2.13.0+cpu-cp311")]
    assert torch_wheels and all(re.fullmatch(r"[0-9a-f]{64}", v) for v in inputs.values())
    assert found["org.opencontainers.image.title"] == "torchbake-test/pytorch-cpu"
    assert found["org.opencontainers.image.base.digest"].startswith("sha256:")




def test_derived_image_cannot_replace_torch(cpu_image, tmp_path):
    """In an image FROM the CPU image, pip refuses torch 0.0.1 and a torchvision that needs it (the
    image's constraint, pip's own message, exit 1) and installs a package that needs any torch,
    keeping the image's; uv refuses torch 0.0.1 too. The very same commands without the constraint
    (the controls) would install it: the refusal is the constraint's, not a bad flag's or a missing
    wheel's. One build, a step per command, each saying its exit status and the torch installed."""
    name, _ = cpu_image
    script = tmp_path / "make_fake_wheels.py"
    script.write_text(
        "import zipfile, os\nos.makedirs('/tmp/fake', exist_ok=True)\n"
        "def w(name, ver, req):\n"
        "    d = name.replace('-', '_') + '-' + ver\n"
        "    with zipfile.ZipFile('/tmp/fake/' + d + '-py3-none-any.whl', 'w') as z:\n"
        "        z.writestr(d + '.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: ' + name + '\\nVersion: ' + ver + '\\n' + req)\n"
        "        z.writestr(d + '.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n"
        "        z.writestr(d + '.dist-info/RECORD', '')\n"
        "w('torch', '0.0.1', '')\n"
        "w('torchvision', '0.0.1', 'Requires-Dist: torch==0.0.1\\n')\n"
        "w('needs-torch', '1.0', 'Requires-Dist: torch\\n')\n"
    )
    pip = "pip install --no-index --find-links /tmp/fake"
    uv = "uv pip install --offline --no-index --find-links /tmp/fake torch==0.0.1"
    installed = "python -c 'import importlib.metadata as m; print(\"TORCH\", m.version(\"torch\"))'"
    packages = ("torch==0.0.1", "torchvision", "needs-torch")
    (tmp_path / "Dockerfile").write_text(
        f"FROM {name}\nCOPY make_fake_wheels.py /tmp/\nRUN python /tmp/make_fake_wheels.py\n"
        + "".join(f"RUN {pip} {package} > /tmp/out 2>&1; echo \"{package} exit $?\"; cat /tmp/out; {installed}\n"
                  for package in packages)
        + f"RUN {uv}; echo \"uv exit $?\"; {installed}\n"
        + f"RUN env -u UV_CONSTRAINT {uv} --dry-run && echo 'uv control ok'\n"
        + f"RUN env -u PIP_CONSTRAINT {pip} torch==0.0.1 --dry-run && echo 'pip control ok'\n"
        "RUN python -c 'import torch; print(\"torch is\", torch.__version__)'\n")
    tag = f"torchbake-test/derived:{uuid.uuid4().hex[:8]}"
    # the steps' output is what is checked: none may come from the cache
    result = docker("build", "--progress=plain", "--no-cache", "-t", tag, str(tmp_path), check=False)
    try:
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        steps = re.split(r"^#\d+ \[ *\d+/\d+\] RUN ", output, flags=re.M)[1:]
        pip_steps = [step for step in steps if step.startswith("pip install")]
        assert len(pip_steps) == len(packages), output[-3000:]
        for package, step in zip(packages, pip_steps, strict=True):
            refused = package != "needs-torch"
            assert f"{package} exit {1 if refused else 0}" in step, (package, step[-2000:])
            assert ("The user requested (constraint) torch==2.13.0+cpu" in step) == refused, (package, step[-2000:])
            assert "TORCH 2.13.0+cpu" in step, (package, step[-2000:])  # the image's torch, whatever pip did
        uv_step = next(step for step in steps if step.startswith("uv pip install"))
        assert "uv exit 1" in uv_step and "TORCH 2.13.0+cpu" in uv_step, uv_step[-2000:]
        assert re.search(r"torch==0\.0\.1 and torch==2\.13\.0\+cpu|torch==2\.13\.0\+cpu and torch==0\.0\.1", uv_step), \
            uv_step[-2000:]  # uv's: the two requirements cannot both hold
        assert "uv control ok" in output and "pip control ok" in output, output[-4000:]
        assert "torch is 2.13.0+cpu" in output  # and it still imports
    finally:
        docker("image", "rm", "--force", tag, check=False)


@pytest.mark.quick
def test_dry_run_creates_nothing(base_image, tb_env, cache_dir):
    engine_before = engine_state(["torchbake-test/dry", base_image])
    before = sorted(p for p in cache_dir.rglob("*"))
    result = run_invoke("build", "--config", "configs/cpu.toml", "--name", "torchbake-test/dry", "--base-img",
                        base_image, "--dry-run", env=tb_env)
    assert result.returncode == 0, result.stderr
    assert "Docker command:" in result.stdout
    assert re.search(r"\S+/docker buildx build --output=type=docker,compression=zstd,oci-mediatypes=true,force-compression=true --provenance=false --progress=plain --file '<context>/Dockerfile'",
                     result.stdout)
    assert engine_state(["torchbake-test/dry", base_image]) == engine_before
    assert sorted(p for p in cache_dir.rglob("*")) == before


DEMO_DEVICE = "/dev/torchbake-demo0"  # made up: made for the test, checked on the host


def test_an_accelerator_from_a_config_file_alone_builds_verifies_and_plans_a_run(base_image, tb_env, tmp_path, run_id,
                                                                                tiny_profile):
    """Accelerators as data: a team's own accelerator, declared in its config file with a toolkit
    (a tarball by URL with its sha256, installed by the script the declaration names) and its
    device access, builds a release image (extension wheel, profile ENV, render GID, a kept
    --build-dir), verifies, rebuilds with --no-prepare, and `run-container` plans its container
    with the declared device, group and environment, or names the device the host lacks."""
    www = tmp_path / "www"
    www.mkdir()
    kit = tmp_path / "kit"
    (kit / "demo_toolkit").mkdir(parents=True)
    (kit / "demo_toolkit" / "setup_demo.sh").write_text(  # not install*.sh: only the declaration names it
        "#!/bin/bash\nset -e\nmkdir -p /usr/local/demo\necho 'fake toolkit 3.1' > /usr/local/demo/version.txt\n")
    with tarfile.open(www / "demo_toolkit.tar.gz", "w:gz") as tar:
        tar.add(kit / "demo_toolkit", arcname="demo_toolkit")
    wheel = make_wheel(www, "torchbake-demo-ext", "1.2.0", ["torch"],
                       {"torchbake_demo_ext/__init__.py": "import torch\nDEVICE = 'demo'\n"})
    config = tmp_path / "demo.toml"
    config.write_text(
        '[accelerators.demo]\ndescription = "a demo accelerator"\n'
        '[[accelerators.demo.toolkits]]\nkey = "demo_toolkit_url"\ninstall = "setup_demo.sh"\nrequired = true\n'
        f'[accelerators.demo.devices]\ndevices = ["{DEMO_DEVICE}"]\ngroups = ["video"]\n'
        'env = { DEMO_VISIBLE_DEVICES = "all" }\n'
        '[image]\nrender_gid = 109\nenv = { DEMO_VISIBLE_DEVICES = "all" }\n'
        '[wheels]\nextension_module = "torchbake_demo_ext"\nextra = []\n'
        '[accelerator]\nprofile = "demo"\n'
    )
    name = f"torchbake-test/demo-ext:{run_id}"
    build_dir = tmp_path / "context"
    args = ("build", "--config", str(tiny_profile), "--config", str(config), "--name", "torchbake-test/demo-ext",
            "--tag", run_id, "--base-img", base_image, "--build-dir", str(build_dir))
    missing = run_invoke(*args, "--dry-run", env=tb_env)  # required, and given by no option: named first
    assert missing.returncode == 2 and "toolkits.demo_toolkit_url" in missing.stderr, missing.stderr[-2000:]
    with http_server(www) as url:
        result = run_invoke(
            *args, "--torch-musa-whl-url", f"{url}/{wheel.name}#sha256={sha256_of(wheel)}",
            env={**tb_env, "TORCHBAKE_TOOLKITS_DEMO_TOOLKIT_URL":
                 f"{url}/demo_toolkit.tar.gz#sha256={sha256_of(www / 'demo_toolkit.tar.gz')}"},
        )
    try:
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-5000:]
        assert re.search(r"torchbake_demo_ext imports\s*│\s*pass", output)
        probe = docker("run", "--rm", name, "bash", "-c",
                       "cat /usr/local/demo/version.txt; getent group render; echo $DEMO_VISIBLE_DEVICES;"
                       " cat /etc/torchbake/constraints.txt").stdout
        assert "fake toolkit 3.1" in probe
        assert "render:x:109:" in probe
        assert "\nall\n" in probe
        assert "torch-demo-ext" not in probe and "torchbake-demo-ext==1.2.0" in probe
        assert labels(name)["torchbake.extension"] == "torchbake-demo-ext==1.2.0"
        assert labels(name)["torchbake.profile"] == "demo"
        assert not [n for n in layer_file_names(name, tmp_path) if "demo_toolkit.tar.gz" in n]
        assert (build_dir / ".torchbake-context.json").is_file()  # kept, as asked

        # The server is gone: --no-prepare must build from the kept context alone.
        again = run_invoke(*args, "--no-prepare", "--no-verify", env=tb_env)
        assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
        assert "Preparing the build context" not in again.stdout

        # Its container: the image's profile, the device access the file declares, checked on this host.
        run = ("run-container", name, "--config", str(config), "--rm", "--command", "true", "--dry-run")
        lacking = run_invoke(*run, env=tb_env)
        assert lacking.returncode == 8, lacking.stdout + lacking.stderr
        assert f"The demo device profile needs {DEMO_DEVICE} on this host, which does not exist." in lacking.stderr
        os.mknod(DEMO_DEVICE, 0o660 | stat.S_IFCHR, os.makedev(1, 3))
        try:
            planned = run_invoke(*run, env=tb_env)
        finally:
            os.unlink(DEMO_DEVICE)
        assert planned.returncode == 0, planned.stdout + planned.stderr
        assert f"--device {DEMO_DEVICE} --group-add video --env DEMO_VISIBLE_DEVICES=all" in planned.stdout
    finally:
        docker("image", "rm", "--force", name, check=False)


@pytest.mark.quick
def test_bootstrap_os_keeps_an_existing_image(base_image, tb_env):
    before = docker("image", "inspect", "--format", "{{.Id}}", base_image).stdout
    result = run_invoke("bootstrap-os", "--suite", "bookworm", "--name", base_image, env=tb_env)
    assert result.returncode == 0
    assert "already exists" in result.stdout
    assert docker("image", "inspect", "--format", "{{.Id}}", base_image).stdout == before


@pytest.mark.quick
def test_failed_verification_keeps_the_previous_image(base_image, tb_env, tmp_path, run_id, tiny_profile):
    """An image that fails verification never takes the tag from the image it pointed to."""
    name = f"torchbake-test/verify-fail:{run_id}"
    docker("tag", base_image, name)  # "yesterday's image"
    before = docker("image", "inspect", "--format", "{{.Id}}", name).stdout
    wheel = make_wheel(tmp_path, "torchbake-demo-ext", "1.0.0", ["torch"], {"torchbake_demo_ext/__init__.py": ""})
    config = tmp_path / "broken.toml"
    config.write_text('[wheels]\nextension_module = "no_such_module"\nextra = []\n')
    result = run_invoke("build", "--config", str(tiny_profile), "--config", str(config),
                        "--name", "torchbake-test/verify-fail", "--tag", run_id, "--base-img", base_image,
                        "--torch-musa-whl-url", str(wheel), env=tb_env)
    output = result.stdout + result.stderr
    try:
        assert result.returncode == 6, output[-3000:]
        assert re.search(r"no_such_module imports\s*│\s*fail", output)
        assert "torchbake: error: torchbake-test/verify-fail:torchbake-candidate-" in output
        assert docker("image", "inspect", "--format", "{{.Id}}", name).stdout == before
        candidate = re.search(r"kept as (torchbake-test/verify-fail:torchbake-candidate-[0-9a-f]+)", output.replace("\n", ""))
        assert candidate and docker("image", "inspect", candidate.group(1), check=False).returncode == 0
        manifest = re.search(r"manifest: (\S+\.manifest\.json)", result.stdout.replace("\n", ""))
        record = json.loads(Path(manifest.group(1)).read_text())
        assert record["status"] == "failed" and "verification" in record["error"].lower()
        assert record["inputs"][1]["option"] == "wheels.extension" and record["inputs"][1]["sha256"] == sha256_of(wheel)
    finally:
        docker("image", "rm", "--force", name, check=False)


def test_every_build_leaves_a_manifest_that_show_build_prints(cpu_image, cpu_env):
    name, result = cpu_image
    assert result.returncode == 0
    cache_dir, tb_env = Path(cpu_env["TORCHBAKE_PATHS_CACHE_DIR"]), cpu_env
    image_id = docker("image", "inspect", "--format", "{{.Id}}", name).stdout.strip()
    found = [json.loads(p.read_text()) for p in (cache_dir / "logs").glob("*.manifest.json")]
    record = next(r for r in found if r.get("image_id") == image_id)
    assert record["status"] == "built" and record["torchbake_version"] == labels(name)["torchbake.version"]
    assert record["image"] == name and record["variant"] == "release" and record["profile"] == "cpu"
    assert record["base_image"]["content_id"] == labels(name)["torchbake.base.content-id"]
    # the FROM image by the digest a registry resolves: this engine's containerd store names it so
    base_digests = json.loads(docker("image", "inspect", "--format", "{{json .RepoDigests}}",
                                     record["base_image"]["reference"]).stdout)
    assert f"{record['base_image']['reference'].rsplit(':', 1)[0]}@{record['base_image']['digest']}" in base_digests
    assert record["base_image"]["digest"] == labels(name)["org.opencontainers.image.base.digest"]
    assert record["input_hash"] == labels(name)["torchbake.input-hash"]
    assert record["inputs"] == [{"option": "wheels.torch", "location": "torch==2.13.0", "sha256": ""}]
    assert any(f.startswith("torch-2.13.0") for f in record["files"])  # the wheel pip resolved, with its digest
    assert "buildx build --output=type=docker,compression=zstd,oci-mediatypes=true,force-compression=true --provenance=false --progress=plain" in record["docker_command"] and "--secret" not in record["docker_command"]
    assert set(record["seconds"]) == {"preflight", "prepare", "build", "verify", "attestations", "total"}
    assert Path(record["log"]).is_file()
    shown = run_invoke("show-build", name, env=tb_env)
    assert shown.returncode == 0, shown.stderr
    for text in (image_id, "status", "built", "given wheels.torch", "torch==2.13.0", "docker command",
                 record["input_hash"], "2.13.0+cpu"):
        assert text in shown.stdout, text
    elsewhere = run_invoke("show-build", name, env={"TORCHBAKE_PATHS_CACHE_DIR": str(cache_dir / "other")})
    assert elsewhere.returncode == 0 and "none on this host" in elsewhere.stdout


def test_diff_names_the_added_companion_the_changed_extension_and_the_new_layer_bytes(base_image, tb_env, tmp_path,
                                                                                       run_id, cpu_image):
    """The CPU image with an extension 1.0.0, and a sibling with one more companion and the
    extension 1.0.1: `invoke diff` names exactly those two changes, the layers they added and their
    bytes; torch's layers are shared."""
    assert cpu_image[1].returncode == 0  # its layers are in the build cache: the two builds below reuse them
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0.0", "1.0.1"):
        make_wheel(wheels, "torchbake-fixture-vendor", version, [], {"vendor_ext/__init__.py": f"V = '{version}'\n"})
    make_wheel(wheels, "torchbake-fixture-diffmate", "1.0", [], {"diffmate/__init__.py": ""})
    old, new = f"torchbake-test/pytorch-cpu:{run_id}-ext100", f"torchbake-test/pytorch-cpu:{run_id}-ext101"
    for image, extension, extra in ((old, "1.0.0", '"numpy"'), (new, "1.0.1", '"numpy", "torchbake-fixture-diffmate==1.0"')):
        (tmp_path / "extra.toml").write_text(f'[wheels]\nextra = [{extra}]\nfind_links = ["{wheels}"]\n'
                                             f'extension = "torchbake-fixture-vendor=={extension}"\n')
        built = run_invoke("build", "--config", "configs/cpu.toml", "--config", str(tmp_path / "extra.toml"),
                           "--name", image.split(":")[0], "--tag", image.split(":")[1], "--base-img", base_image,
                           "--no-verify", env=tb_env)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr
    try:
        result = run_invoke("diff", old, new, "--format", "json", env=tb_env)
        assert result.returncode == 0, result.stdout + result.stderr
        found = json.loads(result.stdout)
        packages = [(c["what"], c["name"], c["old"], c["new"]) for c in found["changes"] if c["what"] in ("python", "deb")]
        assert packages == [("python", "torchbake-fixture-diffmate", "", "1.0"),
                            ("python", "torchbake-fixture-vendor", "1.0.0", "1.0.1")]
        old_layers = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", old).stdout)
        new_layers = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", new).stdout)
        added = [layer for layer in new_layers if layer not in old_layers]
        # the companion's folder, the extension, and the record of what is installed
        assert [layer["diff_id"] for layer in found["layers"]["new"]] == added and len(added) == 3
        assert 0 < found["layers"]["new_bytes"] < 1_000_000 < found["layers"]["shared_bytes"]  # torch is shared
        assert found["summary"] == ("+torchbake-fixture-diffmate 1.0; torchbake-fixture-vendor 1.0.0 → 1.0.1;"
                                    f" {human_size(found['layers']['new_bytes'])} new layers")
        # torch's layer and every layer below it are the very same layers: a changed extension wheel
        # and one more companion build only above torch, and add about their own bytes
        shared, new_bytes = new_layer_bytes(new, old)
        assert shared > torch_layer(old), (shared, torch_layer(old))
        assert new_bytes <= 5 << 20, new_bytes
        assert labels(new)["torchbake.extension"] == "torchbake-fixture-vendor==1.0.1"
        table = run_invoke("diff", old, new, env=tb_env)
        assert table.returncode == 0 and "3 new (" in table.stdout and "diffmate" in table.stdout
        missing = run_invoke("diff", old, "torchbake-test/no-such:image", env=tb_env)
        assert missing.returncode == 2 and "torchbake-test/no-such:image" in missing.stderr, missing.stderr
    finally:
        docker("image", "rm", "--force", old, new, check=False)


def test_verify_gpus_says_the_gpu_checks_were_not_run_and_why_on_a_host_without_gpus(cpu_image, base_image, tb_env,
                                                                                       tiny_profile, run_id, tmp_path):
    """Never a silent pass: the CPU image has no GPUs to check; a CUDA image on this GPU-less host
    cannot get them. Both say so in the table and in a line of their own; the other checks pass
    (the verify task on the CPU image: torch pinned among them, nothing failed)."""
    name, _ = cpu_image
    result = run_invoke("verify", name, "--gpus", env=tb_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "torch pinned" in result.stdout and "fail" not in result.stdout
    assert re.search(r"GPU checks\s*│\s*skip\s*│\s*not run: the image's cpu profile has no GPUs", result.stdout)
    assert "The GPU checks were NOT run: the image's cpu profile has no GPUs" in result.stdout.replace("\n", " ")
    cuda = f"torchbake-test/cuda-{run_id}:1"
    (tmp_path / "cuda.toml").write_text('[accelerator]\nprofile = "cuda"\n')
    built = run_invoke("build", "--config", str(tiny_profile), "--config", str(tmp_path / "cuda.toml"), "--name",
                       cuda.split(":")[0], "--tag", "1", "--base-img", base_image, "--verify-gpus", env=tb_env)
    try:
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr
        flat = re.sub(r"\s*│\s*|\s+", " ", built.stdout)
        assert "GPU checks skip not run: this host cannot give a cuda container its GPUs" in flat
        assert "NVIDIA Container Toolkit" in flat
        manifest = next(json.loads(p.read_text()) for p in (Path(tb_env["TORCHBAKE_PATHS_CACHE_DIR"]) / "logs").glob(
            f"*cuda-{run_id}*.manifest.json") if "gpu_checks" in json.loads(p.read_text()))
        assert manifest["gpu_checks"][cuda][0]["status"] == "skip"
    finally:
        docker("image", "rm", "--force", cuda, check=False)


@pytest.mark.parametrize("given", ["path", "url"])
def test_a_wheel_changed_under_its_name_is_built_with_its_new_bytes(given, base_image, tb_env, tmp_path, run_id):
    """A torch wheel rebuilt under the same file name (a vendor nightly keeps its version for
    days), named by its path or by a URL without a digest: the second build holds the new bytes,
    its label their sha256, and says so; the wheelhouse's and the download cache's old copies are
    not reused by name."""
    import hashlib

    from .helpers import TINY_TORCH_VERSION, make_tiny_torch, make_wheel

    folder = tmp_path / "wheels"
    wheel = make_tiny_torch(folder)
    name = f"torchbake-test/renamed-{given}"
    nights = []
    with http_server(folder) as url:
        location = str(wheel) if given == "path" else f"{url}/{wheel.name}"
        for night in (1, 2):
            if night == 2:  # rebuilt: one file more, the same name; a day later
                make_wheel(folder, "torch", TINY_TORCH_VERSION, [], {
                    "torch/__init__.py": f"__version__ = {TINY_TORCH_VERSION!r}\nfrom . import cuda, version\n",
                    "torch/version.py": f"__version__ = {TINY_TORCH_VERSION!r}\ncuda = None\nhip = None\n"
                                        "git_version = 'tiny'\n",
                    "torch/cuda.py": "def is_available():\n    return False\n\n\ndef get_arch_list():\n    return []\n",
                    "torch/nightly.py": "NIGHT = 2\n"})
                os.utime(wheel, (wheel.stat().st_mtime + 86400,) * 2)
            result = run_invoke("build", "--release", "--base-img", base_image, "--torch-whl-url", location,
                                "--name", name, "--tag", run_id, "--no-verify", env={**tb_env, "TORCHBAKE_WHEELS_EXTRA": ""})
            assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
            nights.append((result.stdout, hashlib.sha256(wheel.read_bytes()).hexdigest(),
                           json.loads(labels(f"{name}:{run_id}")["torchbake.inputs"])))
    try:
        (first, old, first_inputs), (second, new, second_inputs) = nights
        assert old != new and "unchanged" not in second, second[-3000:]
        assert first_inputs[wheel.name] == old and second_inputs[wheel.name] == new
        shown = docker("run", "--rm", "--entrypoint", "python", f"{name}:{run_id}", "-c",
                       "import torch.nightly; print(torch.nightly.NIGHT)").stdout.strip()
        assert shown == "2"
        if given == "url":
            assert f"changed: sha256 {old} → {new}" in second, second[-3000:]
    finally:
        docker("image", "rm", "--force", f"{name}:{run_id}", check=False)
