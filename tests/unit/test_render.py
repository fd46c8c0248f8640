"""Rendered Dockerfiles and commands, compared as exact text."""

from __future__ import annotations

import re
from pathlib import Path

from torchbake.adapters.engine import DockerClient
from torchbake.building.input_hash import build_args
from torchbake.configuration.validation import project_name
from torchbake.core import data
from torchbake.inputs import wheelhouse
from torchbake.inputs.context import render_dockerfile, unknown_optional_steps
from torchbake.planning import config
from torchbake.variants.release import plan as plan_release

TEMPLATE = "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """Each instruction of ``dockerfile`` as (keyword, the rest, its continued lines and all)."""
    return re.findall(r"^([A-Z]+) ((?:.*\\\n)*.*)", dockerfile, re.MULTILINE)


def test_dockerfile_without_env_is_the_template():
    assert render_dockerfile(TEMPLATE, {}, "cpu") == TEMPLATE


def test_dockerfile_gets_env_block_from_configuration():
    rendered = render_dockerfile(TEMPLATE, {"MTHREADS_VISIBLE_DEVICES": "all", "TORCH_CUDA_ARCH_LIST": "8.0;9.0", "Q": 'a"b'}, "musa")
    assert rendered == (
        "ARG BASE_IMAGE\n"
        "FROM ${BASE_IMAGE}\n"
        "\n"
        "# Added by torchbake from the configuration (profile musa).\n"
        'ENV MTHREADS_VISIBLE_DEVICES="all" \\\n'
        '    TORCH_CUDA_ARCH_LIST="8.0;9.0" \\\n'
        '    Q="a\\"b"\n'
    )


def test_each_companion_gets_its_own_stage_and_layer_in_order():
    template = ("FROM installer AS torch\n# @torchbake-companion-stages@\n\nFROM os\n# @torchbake-companions@\n"
                "COPY constraints.txt /etc/torchbake/constraints.txt\n")
    stage = ("FROM installer AS companion-{0}\n"
             "RUN --network=none --mount=type=bind,source=wheelhouse/companions/{0},target=/tmp/torchbake/wheels \\\n"
             "    --mount=type=bind,from=torchbake-uv,target=/tmp/torchbake/uv \\\n"
             "    bash /opt/torchbake/common/step.sh stage_wheels.sh /tmp/torchbake/wheels /tmp/torchbake/uv")
    assert render_dockerfile(template, {}, "cpu", companions=["01-numpy", "02-pyyaml"]) == (
        "FROM installer AS torch\n" + stage.format("01-numpy") + "\n\n" + stage.format("02-pyyaml")
        + "\n\nFROM os\nCOPY --from=companion-01-numpy /opt/venv/ /opt/venv/\n"
        "COPY --from=companion-02-pyyaml /opt/venv/ /opt/venv/\nCOPY constraints.txt /etc/torchbake/constraints.txt\n")
    assert render_dockerfile(template, {}, "cpu") == template.replace(
        "# @torchbake-companion-stages@", "# (no companions)").replace("# @torchbake-companions@", "# (no companions)")


def test_an_optional_step_stays_only_when_the_context_has_something_for_it():
    template = ("FROM x\n# @torchbake-if toolkits@\nRUN --mount=type=bind,source=toolkits,target=/t \\\n"
                "    bash install_toolkits.sh /t\n\n# @torchbake-if extension@\nRUN install extension\n\nCMD [\"bash\"]\n")
    assert render_dockerfile(template, {}, "cpu", steps={"toolkits"}) == (
        "FROM x\nRUN --mount=type=bind,source=toolkits,target=/t \\\n    bash install_toolkits.sh /t\n\n"
        "# (no extension)\n\nCMD [\"bash\"]\n")
    assert render_dockerfile(template, {}, "cpu", steps={"extension"}) == (
        "FROM x\n# (no toolkits)\n\nRUN install extension\n\nCMD [\"bash\"]\n")


def test_the_templates_name_only_steps_a_context_can_have_something_for():
    assert unknown_optional_steps("# @torchbake-if toolkit@\nRUN a\n\n# @torchbake-if extension@\nRUN b\n") == ["toolkit"]
    for variant in ("base", "dev", "release"):
        assert unknown_optional_steps((data.ROOT / f"docker/ubuntu/dockerfile.{variant}").read_text()) == []


def test_release_dockerfile_template_has_no_syntax_line_or_heredoc():
    text = (data.ROOT / "docker/ubuntu/dockerfile.release").read_text()
    assert not [line for line in text.splitlines() if line.replace(" ", "").startswith("#syntax=")]
    assert "<<" not in text
    # wheels and toolkits reach the build only through bind mounts
    assert "--mount=type=bind,source=wheelhouse" in text
    assert "--mount=type=bind,source=toolkits" in text
    assert "COPY wheelhouse" not in text and "ADD " not in text


def test_a_step_that_reaches_out_mounts_its_secrets_and_every_other_runs_without_a_network():
    """The stock steps, every optional one and a companion's stage included: a step that needs
    nothing beyond the context (Python, the wheels, the records) runs with no network, so nothing
    but the context can be installed, and it skips the network sandbox BuildKit makes for a step
    (its veth and namespace: 0.09 s of the engine's CPU a step, 2026-11-30); the steps that reach
    out (OS packages, toolkits, clones, a compile cache's store) are the ones that mount the secrets."""
    from torchbake.inputs.context import OPTIONAL_STEPS, SECRET_IDS, mounted_secrets

    for name in ("base", "release", "dev"):
        template = (data.ROOT / f"docker/ubuntu/dockerfile.{name}").read_text()
        rendered = render_dockerfile(template, {}, "cpu", steps=OPTIONAL_STEPS, companions=["01-numpy"],
                                     secrets=SECRET_IDS)
        steps = [body for keyword, body in instructions(rendered) if keyword == "RUN"]
        assert len(steps) >= {"base": 3, "release": 13, "dev": 8}[name], (name, steps)
        for step in steps:
            reaches_out = bool(mounted_secrets("RUN " + step) & SECRET_IDS)
            offline = step.startswith("--network=none ")
            assert reaches_out != offline, (name, step)


def client() -> DockerClient:
    return DockerClient(binary="/usr/bin/docker", version="26.1.5", build_mode="buildx")


def test_build_command_buildx_loads_into_the_engine():
    argv, env = client().build_command(
        context=Path("/ctx"), dockerfile=Path("/ctx/Dockerfile"), tag="a/b:c",
        build_args={"BASE_IMAGE": "debian:12"}, labels={"torchbake.python": "3.11"},
        secrets=[("ca", Path("/ca.pem"))],
    )
    assert env == {}
    assert argv == [
        "/usr/bin/docker", "buildx", "build", "--output=type=docker,compression=zstd,oci-mediatypes=true,force-compression=true", "--provenance=false", "--progress=plain", "--file", "/ctx/Dockerfile",
        "--tag", "a/b:c", "--build-arg", "BASE_IMAGE=debian:12", "--label", "torchbake.python=3.11",
        "--secret", "id=ca,src=/ca.pem", "/ctx",
    ]


# what an x86_64 image of manylinux_2_28 runs: every older manylinux, under its old name too
OLDER_X86_64 = [tag for minor in range(27, 4, -1) for tag in (
    f"manylinux_2_{minor}_x86_64", *{17: ["manylinux2014_x86_64"], 12: ["manylinux2010_x86_64"],
                                     5: ["manylinux1_x86_64"]}.get(minor, []))]


def test_pip_download_command_targets_the_image_python():
    options = config.resolve([], {}, {"wheels.index_url": "https://mirror.invalid/simple"}).settings().wheels
    argv = wheelhouse.pip_download_command(["torch==2.13.0", "numpy"], Path("/w"), "3.11", options, python="py")
    assert argv == [
        "py", "-m", "pip", "download", "--dest", "/w", "--only-binary=:all:", "--python-version", "3.11",
        "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none",
        "--platform", "manylinux_2_28_x86_64", *(arg for tag in OLDER_X86_64 for arg in ("--platform", tag)),
        "--platform", "linux_x86_64", "--platform", "any",
        "--index-url", "https://mirror.invalid/simple", "torch==2.13.0", "numpy",
    ]


def test_build_args_of_the_cpu_profile():
    settings = config.resolve([config.CONFIG_DIR / "cpu.toml"], {}).settings()
    assert build_args(plan_release(settings)) == {
        "BASE_IMAGE": "debian:bookworm", "PYTHON_VERSION": "3.11", "PYTHON_PROVIDER": "os",
        "RENDER_GID": "0", "INSTALLER": "uv", "KEEP_UV": "1", "SOURCE_DATE_EPOCH": "0",
        "WHEEL_MACHINE": "x86_64",  # the wheel stages unpack for the image's machine and tags
        "WHEEL_PLATFORMS": " ".join(["manylinux_2_28_x86_64", *OLDER_X86_64, "linux_x86_64"]),
    }


def test_requirement_name_from_wheel_files_and_requirements():
    assert project_name("https://h.invalid/torch_musa-1.3.0-cp310-cp310-linux_x86_64.whl#sha256=" + "0" * 64) == "torch-musa"
    assert project_name("torch==2.13.0") == "torch"
    assert project_name("/w/torch-2.0.0-cp38-cp38-linux_x86_64.whl") == "torch"
    assert project_name("Torch_Vision>=0.1") == "torch-vision"


def test_a_release_image_has_a_step_for_uv_only_when_it_keeps_uv(tmp_path):
    """[python] keep_uv = false: no keep_uv step (it would add an empty layer, two in a row with
    the next stage's; docker/buildx#537), and uv kept: its own step."""
    from types import SimpleNamespace

    from torchbake.inputs.context import Staging

    template = (data.ROOT / "docker/ubuntu/dockerfile.release").read_text()
    for keep in (True, False):
        stage = Staging(tmp_path / str(keep), temporary=False)
        stage.installer(SimpleNamespace(keep_uv=keep, installer="pip"), "3.11", None, tmp_path, None, wanted=False)
        rendered = render_dockerfile(template, {}, "cpu", steps=stage.steps)
        assert ("step.sh keep_uv.sh /tmp/torchbake/uv" in rendered) is keep
        assert ("# (no keep-uv)" in rendered) is not keep


def test_a_program_folder_goes_to_the_build_as_a_layout_made_once_and_named_by_its_digest(tmp_path):
    """uv/ as uv.oci/, an OCI image layout of one uncompressed layer holding the folder: its
    layer made once into the cache's tools/ and hard-linked into every context after; the build
    names it by its manifest's digest."""
    import hashlib
    import json
    import os
    import tarfile
    from types import SimpleNamespace

    from torchbake.inputs.context import Staging, named_contexts

    contexts = []
    for number, umask in enumerate((0o022, 0o022, 0o077)):  # another user's umask: the same layer
        stage = Staging(tmp_path / f"context{number}", temporary=False)
        before = os.umask(umask)
        try:
            stage.installer(SimpleNamespace(keep_uv=False, installer="pip"), "3.11", None, tmp_path / "cache", None,
                            wanted=False)
        finally:
            os.umask(before)
        stage.finish(data.ROOT / "docker/ubuntu/dockerfile.release", {}, "cpu", [])
        contexts.append(tmp_path / f"context{number}")
    layers = list((tmp_path / "cache" / "tools").glob("uv-layer-*.tar"))
    assert len(layers) == 2  # made once for the two folders alike, again for the other umask's
    indexes = {(context / "uv.oci" / "index.json").read_text() for context in contexts}
    assert len(indexes) == 1  # one image, whoever made the folder
    layout = contexts[1] / "uv.oci"
    index = json.loads((layout / "index.json").read_text())
    digest = index["manifests"][0]["digest"]
    manifest = (layout / "blobs" / "sha256" / digest.split(":")[1]).read_bytes()
    assert "sha256:" + hashlib.sha256(manifest).hexdigest() == digest
    layer = json.loads(manifest)["layers"][0]
    blob = layout / "blobs" / "sha256" / layer["digest"].split(":")[1]
    assert blob.stat().st_ino == (contexts[0] / "uv.oci" / blob.relative_to(layout)).stat().st_ino  # linked in
    assert blob.stat().st_ino in {layer.stat().st_ino for layer in layers}  # the cache's layer
    with tarfile.open(blob) as tar:
        assert [(m.name, m.mode, m.uid, m.gid, m.mtime) for m in tar.getmembers()] == [
            (".", 0o755, 0, 0, 0), ("./.keep", 0o644, 0, 0, 0)]
    assert named_contexts(contexts[1]) == {"torchbake-uv": f"oci-layout://{layout.resolve()}:torchbake@{digest}"}
    rendered = (contexts[1] / "Dockerfile").read_text()
    assert "from=torchbake-uv,target=/tmp/torchbake/uv" in rendered and "source=uv," not in rendered
    # buildx cuts an oci-layout:// source at its first ":" or "@": such a path sends the folder itself
    odd = tmp_path / "run:2026-11-30@05"
    contexts[1].rename(odd)
    assert named_contexts(odd) == {"torchbake-uv": str(odd / "uv")}
    # a folder edited since it was prepared (--no-prepare builds it as it is), a layout gone or
    # damaged: the folder itself
    (contexts[0] / "uv" / "uv").write_text("#!/bin/sh\necho edited by hand\n")
    assert named_contexts(contexts[0]) == {"torchbake-uv": str(contexts[0] / "uv")}
    (contexts[2] / "uv.oci" / "index.json").unlink()
    assert named_contexts(contexts[2]) == {"torchbake-uv": str(contexts[2] / "uv")}


def test_a_program_layer_cut_short_in_the_cache_is_made_again_and_an_unwritable_cache_makes_it_here(tmp_path):
    """A layer tar cut short in the cache's tools/ is not reused (every later build would fail in
    the engine with "unexpected EOF"); where tools/ cannot be written (a cache others share), the
    layer is made in the context alone and the build goes on."""
    import json
    from types import SimpleNamespace

    from torchbake.inputs.context import Staging

    def prepare(name: str, cache: Path) -> Path:
        stage = Staging(tmp_path / name, temporary=False)
        stage.installer(SimpleNamespace(keep_uv=False, installer="pip"), "3.11", None, cache, None, wanted=False)
        stage.finish(data.ROOT / "docker/ubuntu/dockerfile.release", {}, "cpu", [])
        return tmp_path / name

    first = prepare("first", tmp_path / "cache")
    (layer,) = (tmp_path / "cache" / "tools").glob("uv-layer-*.tar")
    whole = layer.read_bytes()
    layer.write_bytes(whole[:1000])
    again = prepare("again", tmp_path / "cache")
    assert layer.read_bytes() == whole
    assert (again / "uv.oci" / "index.json").read_text() == (first / "uv.oci" / "index.json").read_text()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "tools").write_text("not a folder")  # tools/ cannot be made there
    here = prepare("here", tmp_path / "shared")
    index = json.loads((here / "uv.oci" / "index.json").read_text())
    assert index == json.loads((first / "uv.oci" / "index.json").read_text())
    assert not list(here.glob(".uv-layer*"))  # the layer is in the layout only


def test_a_build_dir_that_cannot_be_made_is_named_not_a_traceback():
    """--build-dir where no folder can be made (/proc): the folder and the reason, exit 2."""
    import pytest

    from torchbake.core.errors import ConfigurationError
    from torchbake.inputs.context import Staging

    with pytest.raises(ConfigurationError) as raised:
        Staging(Path("/proc/torchbake-test-context"), temporary=False)
    assert str(raised.value).startswith("Cannot prepare the build context in /proc/torchbake-test-context.preparing (")
    assert raised.value.exit_code == 2


def test_a_dockerfile_mounts_only_the_secrets_its_build_passes(tmp_path):
    """BuildKit 0.13 (Docker 26) hashes every file of the filesystem a step runs on before each step
    that mounts a secret (moby/buildkit#5251): a dev compile step on a tree of sources and objects.
    torchbake's own secrets a build does not pass are left out of its Dockerfile; a team's own
    secret stays; the step keeps its command (``RUN --mount=…secret… \\`` then the command)."""
    import re

    from torchbake.inputs.context import OPTIONAL_STEPS, SECRET_IDS, mounted_secrets

    for name in ("base", "release", "dev"):
        template = (data.ROOT / f"docker/ubuntu/dockerfile.{name}").read_text()
        runs = render_dockerfile(template, {}, "cpu", steps=OPTIONAL_STEPS).count("\nRUN ")
        for passed in (set(), {"ca_bundle"}, {"compile_cache", "git_credentials"}, set(SECRET_IDS)):
            rendered = render_dockerfile(template, {}, "cpu", steps=OPTIONAL_STEPS, secrets=passed)
            assert mounted_secrets(rendered) == mounted_secrets(template) & passed, (name, passed)
            # every RUN still runs its command: none became empty or lost its continuation
            assert not re.search(r"^RUN\s*(\\\n\s*)*$", rendered, re.MULTILINE), rendered
            assert rendered.count("\nRUN ") == runs
    base = render_dockerfile((data.ROOT / "docker/ubuntu/dockerfile.base").read_text(), {}, "cpu", secrets=())
    assert "\nRUN TORCHBAKE_INSTALL_CA=${INSTALL_CA} " in base
    team = "FROM x\nRUN --mount=type=secret,id=team_token cat /run/secrets/team_token\n" \
           "RUN --mount=id=compile_cache,type=secret,target=/c \\\n    make\n" \
           "RUN --mount=type=secret,id=ca_bundle,required=true make\n"  # a template that asks for it: its build fails without
    assert render_dockerfile(team, {}, "p", secrets=()) == (
        "FROM x\nRUN --mount=type=secret,id=team_token cat /run/secrets/team_token\nRUN make\n"
        "RUN --mount=type=secret,id=ca_bundle,required=true make\n")


def test_a_dev_image_without_further_extensions_has_no_step_for_them():
    """The further extensions' step ([dev] extensions) mounts their clones' git credentials, and on
    BuildKit 0.13 a step that mounts a secret first reads every file below it (moby/buildkit#5251:
    3.5 s of the engine's CPU on the test fixture's dev base, 2026-12-03). A dev image with none
    has no such step (tests/e2e/test_dev_cache.py builds one); with some it is there."""
    from torchbake.inputs.context import SECRET_IDS, mounted_secrets

    template = (data.ROOT / "docker/ubuntu/dockerfile.dev").read_text()
    without = render_dockerfile(template, {}, "cpu", steps=(), secrets=SECRET_IDS)
    assert "build_extras.sh" not in without and "extensions.txt" not in without, without
    assert mounted_secrets(without) == mounted_secrets(template)  # the other steps keep theirs
    extras = render_dockerfile(template, {}, "cpu", steps=("extras",), secrets=SECRET_IDS)
    assert "COPY extensions.txt /opt/torchbake/extensions.txt\nARG INSTALLER=uv\nRUN " in extras
    assert "bash /opt/torchbake/common/build_extras.sh /opt/torchbake/extensions.txt" in extras


def test_the_secrets_a_plan_passes_are_its_ca_bundle_credentials_and_compile_cache(tmp_path):
    from torchbake.building.builder import build_secrets
    from torchbake.variants.dev import plan as plan_dev

    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    credentials = tmp_path / "git-credentials"
    credentials.write_text("https://u:p@git.example\n")
    plain = config.resolve([config.CONFIG_DIR / "cpu.toml"], {}).settings()
    assert plan_release(plain).passed_secrets() == frozenset()
    trusting = config.resolve([config.CONFIG_DIR / "cpu.toml"], {}, {"downloads.ca_bundle": str(bundle)}).settings()
    assert plan_release(trusting).passed_secrets() == {"ca_bundle"}
    dev = config.resolve([], {}, {"build.variant": "dev", "dev.compile_cache": "redis://cache.example:6379",
                                  "dev.git_credential_file": str(credentials)}, variant="dev").settings()
    assert plan_dev(dev).passed_secrets() == {"compile_cache", "git_credentials"}
    every = config.resolve([], {}, {"build.variant": "dev", "dev.compile_cache": "redis://cache.example:6379",
                                    "dev.git_credential_file": str(credentials), "downloads.ca_bundle": str(bundle),
                                    "paths.cache_dir": str(tmp_path / "cache")}, variant="dev").settings()
    # the very secrets the build command passes (its --secret flags)
    assert {secret_id for secret_id, _ in build_secrets(plan_dev(every))} == plan_dev(every).passed_secrets() == {
        "ca_bundle", "compile_cache", "git_credentials"}


def test_a_kept_context_prepared_without_a_secret_the_build_now_passes_is_refused(tmp_path):
    """--no-prepare: a context rendered without a secret mount its template has, for a build that
    now passes that secret, would run those steps without it; one prepared before secrets were
    left out (no record of them) mounts them all. A secret mounted only in an optional step counts
    by what the context was prepared for, not by what its Dockerfile shows."""
    import dataclasses

    import pytest

    from torchbake.core.errors import ConfigurationError
    from torchbake.inputs.context import PreparedContext, check_secret_mounts

    template = (data.ROOT / "docker/ubuntu/dockerfile.dev").read_text()
    prepared = PreparedContext(path=tmp_path, torch_version="", pins={}, extension="", sources={}, inputs={},
                               dockerfile_sha256="", common_sha256="", temporary=False, secrets=("git_credentials",))
    assert PreparedContext.from_json(prepared.to_json(), tmp_path) == prepared
    check_secret_mounts(prepared, template, {"git_credentials"})
    check_secret_mounts(prepared, "FROM x\n", {"compile_cache"})  # a template that never mounts it
    check_secret_mounts(dataclasses.replace(prepared, secrets=None), template, {"ca_bundle"})  # an older context
    with pytest.raises(ConfigurationError, match=r"prepared without the secrets ca_bundle, compile_cache, which this"
                                                 r" build passes.*Run once without --no-prepare"):
        check_secret_mounts(prepared, template, {"git_credentials", "compile_cache", "ca_bundle"})
    optional = "FROM x\nRUN true\n# @torchbake-if extension@\nRUN --mount=type=secret,id=compile_cache \\\n    make\n"
    check_secret_mounts(dataclasses.replace(prepared, secrets=("compile_cache",)), optional, {"compile_cache"})


def test_only_the_flags_of_run_lose_a_secret_mount_and_every_step_keeps_its_command():
    """Found by the review: a mount in a comment or a command stays; a `RUN` whose first flag goes
    keeps its command whether a comment or a blank line follows; BuildKit's spellings of a secret
    mount (upper case, the id from its target, required=1) are read as BuildKit reads them; a
    file with heredocs or another escape character is left as written."""
    from torchbake.inputs.context import mounted_secrets

    def rendered(text):
        return render_dockerfile(text, {}, "p", secrets=())

    assert rendered("RUN --mount=type=secret,id=ca_bundle \\\n    # the marker\n    echo ran > /m\n") == \
        "RUN \\\n    # the marker\n    echo ran > /m\n"
    assert rendered("RUN --mount=type=secret,id=ca_bundle \\\n\n    echo ran > /m\n") == "RUN \\\n\n    echo ran > /m\n"
    comment = "# these use --mount=type=secret,id=ca_bundle \\\nRUN echo ran > /m\n"
    assert rendered(comment) == comment
    command = "RUN echo --mount=type=secret,id=ca_bundle\n"
    assert rendered(command) == command and not mounted_secrets(command)
    assert rendered("RUN --mount=type=secret,id=ca_bundle \\\n    --mount=type=secret,id=compile_cache \\\n"
                    "    --mount=type=bind,source=a,target=/a \\\n    make\n") == \
        "RUN --mount=type=bind,source=a,target=/a \\\n    make\n"
    assert rendered("run --mount=TYPE=Secret,ID=ca_bundle true\n") == "run true\n"
    assert rendered("RUN --mount=type=secret,target=/run/secrets/compile_cache true\n") == "RUN true\n"
    for required in ("required", "required=1", "required=t", "required=True"):
        kept = f"RUN --mount=type=secret,id=ca_bundle,{required} true\n"
        assert rendered(kept) == kept
    assert rendered("RUN --mount=type=secret,id=ca_bundle,required=false true\n") == "RUN true\n"
    for untouched in ("RUN --mount=type=secret,id=ca_bundle <<EOF\ntrue\nEOF\n",
                      "# escape=`\nRUN --mount=type=secret,id=ca_bundle true\n"):
        assert rendered(untouched) == untouched


# read by common/step.sh in every step (the layers' file times), so every step's own
EVERY_STEPS = {"SOURCE_DATE_EPOCH"}


def test_a_build_argument_is_declared_just_before_the_first_step_that_reads_it():
    """A RUN step's cache key holds every build argument declared above it in its stage, read or
    not: an argument declared early made images that differ only in it (their Python, their
    installer, keep_uv) fetch and install the same OS packages each again, each in a layer of its
    own. So each one is read by an instruction from its declaration to the next RUN."""
    late = []
    for name in ("release", "base", "dev"):
        found = instructions((data.ROOT / f"docker/ubuntu/dockerfile.{name}").read_text())
        first_from = next(i for i, (k, _) in enumerate(found) if k == "FROM")
        for index, (keyword, text) in enumerate(found[first_from:], first_from):  # (an ARG before it is the FROM lines')
            argument = text.split("=")[0].strip()
            if keyword != "ARG" or argument in EVERY_STEPS:
                continue
            following = found[index + 1:]
            until_run = following[:next((i + 1 for i, (k, _) in enumerate(following) if k == "RUN"), len(following))]
            if not any(re.search(rf"\$\{{?{argument}\b", body) for _, body in until_run):
                late.append(f"dockerfile.{name}: ARG {argument} (the next step does not read it)")
    assert late == []
