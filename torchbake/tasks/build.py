"""``invoke build`` (release from wheels, or dev from source) and ``invoke build-base``."""

from __future__ import annotations

from invoke import Collection, task

from ..cli import BUILDER_HELP, COMMON_HELP, FlagTask, check_folders, docker_client, reports_errors, resolve_config
from ..errors import ConfigurationError
from ..lazy import LazyModule

# The work behind a task is imported when the task runs: invoke imports every task module to
# parse any command line, and a command that fails on its flags should not pay for all of them.
builder = LazyModule("torchbake.builder")
variants = LazyModule("torchbake.variants")

BOOTSTRAP_HELP = "Never make a missing debian:/ubuntu: FROM image with debootstrap (pull it, or fail). [bootstrap] auto"

FORCE_HELP = ("Build even when the image under NAME:TAG already has these inputs (the same input hash);"
              " without it such a build prints 'unchanged' and does nothing")

CHECK_REPRODUCIBLE_HELP = ("Then build the same context again without any cache and compare: the same image"
                           " digest, or exit 6 naming the files that differ (implies --force)")

TRUST_HELP = {
    "require_hashes": "Fail unless every URL input carries a sha256 (#sha256= or [checksums]). [downloads] require_hashes",
    "ca_bundle": "PEM file of CAs to trust (an intercepting proxy's) for host downloads, pip, git and the build's network steps (a BuildKit secret). [downloads] ca_bundle",
}


def trust_overrides(require_hashes: bool, ca_bundle: str | None) -> dict:
    return {"downloads.require_hashes": True if require_hashes else None, "downloads.ca_bundle": ca_bundle}


REGISTRY_HELP = {
    "registry": "Registry host and path, e.g. registry.example.com/ml: the image name is prefixed with it, the"
                " registry is asked (without pulling) whether it already holds an image with these inputs, and it"
                " carries the build cache. [registry] url",
    "require_registry": "Fail when the registry cannot be asked, instead of building. [registry] require",
    "no_registry_check": "Do not ask the registry whether it holds the image already. [registry] check",
}


def registry_overrides(registry: str | None, require_registry: bool, no_registry_check: bool) -> dict:
    return {"registry.url": registry, "registry.require": True if require_registry else None,
            "registry.check": False if no_registry_check else None}


HELP = {
    **COMMON_HELP,
    **BUILDER_HELP,
    "name": "Image name (build.sh -n/--name). [image] name, default from [naming]: torchbake/pytorch-<profile>",
    "tag": "Image tag (build.sh -t/--tag). [image] tag, default from [naming] (dev-py3.11; release: 2.13.0-py3.11), or latest with --name",
    "base_img": "Image to build FROM (build.sh -b/--base_img). [image] base, default: release the OS image of the Python"
                " (debian:bookworm for 3.11, pulled or made with debootstrap); dev the image build-base names",
    "docker_file": "Dockerfile template (build.sh -f/--docker_file). Default docker/ubuntu/dockerfile.<variant>",
    "python": "Python version of the image, X.Y (build.sh -v/--python_version). [python] version",
    "musa_toolkits_url": "URL or path of the vendor toolkit tarball (build.sh -m/--musa_toolkits_url)",
    "mudnn_url": "URL or path of the DNN library tarball (build.sh --mudnn_url)",
    "mccl_url": "URL or path of the collective library tarball (build.sh --mccl_url)",
    "torch_whl_url": "torch wheel: URL, path or requirement such as torch==2.13.0; append #sha256=HEX to pin (build.sh --torch_whl_url)",
    "torch_musa_whl_url": "Vendor extension wheel: URL, path or requirement (build.sh --torch_musa_whl_url)",
    "release": "Build a release image from wheels instead of a dev image from source (build.sh -r/--release)",
    "build_dir": "Prepare the build context in this folder and keep it (DOCKER_BUILD_DIR); default a temporary folder",
    "no_prepare": "Reuse the context already prepared in --build-dir (build.sh --no_prepare)",
    "dry_run": "Print the plan (inputs, context, exact docker command) and touch nothing",
    "no_verify": "Skip `verify` after the build",
    "torch_musa_tag": "Git ref of the vendor extension to build (dev; build.sh --torch_musa_tag). [sources] extension_tag",
    "git_credential_file": "git credentials (store format) for private repos, given to the build only as a BuildKit secret (dev; build.sh -c)",
    "keep_git": "Keep .git folders of source trees in the image",
    "slim": "Dev: also build NAME:TAG-slim, the runtime stage without compilers and sources, and report both sizes",
    "no_cache": "Build every step again, ignoring the engine's layer cache (what build_all.sh always did)",
    "check_reproducible": CHECK_REPRODUCIBLE_HELP,
    "force": FORCE_HELP,
    "no_bootstrap": BOOTSTRAP_HELP,
    **TRUST_HELP,
    **REGISTRY_HELP,
}

NAMES = {
    "name": ["n", "i"],
    "tag": ["t"],
    "base_img": ["b", "base_img"],
    "docker_file": ["f", "docker_file"],
    "python": ["v", "python-version"],
    "musa_toolkits_url": ["m", "musa_toolkits_url"],
    "mudnn_url": ["mudnn_url"],
    "mccl_url": ["mccl_url"],
    "torch_whl_url": ["torch_whl_url"],
    "torch_musa_whl_url": ["torch_musa_whl_url"],
    "release": ["r"],
    "build_dir": ["build_dir"],
    "no_prepare": ["no_prepare"],
    "dry_run": ["dry_run"],
    "no_verify": ["no_verify"],
    "git_credential_file": ["c"],
}


# Flags that mean something for one variant only: given for the other, they are an error, never
# silently ignored.
DEV_ONLY = {"torch_musa_tag": "the vendor extension is cloned at a tag only in dev builds",
            "git_credential_file": "only dev builds clone private sources",
            "keep_git": "only dev builds copy source trees",
            "slim": "the slim image is the runtime stage of a dev build"}
RELEASE_ONLY = {"torch_whl_url": "a dev image builds torch from source",
                "torch_musa_whl_url": "a dev image builds the extension from source"}


def _no_flags_without_effect(variant: str, given: dict) -> None:
    """A flag that does nothing for ``variant`` is an error naming it and why."""
    ignored = DEV_ONLY if variant == "release" else RELEASE_ONLY
    for name, why in ignored.items():
        if given.get(name):
            other = "a dev image (leave out --release)" if variant == "release" else "a release image (add --release)"
            raise ConfigurationError(f"--{name.replace('_', '-')} has no effect on a {variant} image: {why}."
                                     f" Leave it out, or build {other}.")


def _run(plan, settings, dry_run: bool, force: bool, check_reproducible: bool = False) -> None:
    check_folders(settings, create=not dry_run)
    client = docker_client(settings)
    if dry_run:
        builder.dry_run(plan, client, check_reproducible=check_reproducible)
        return
    builder.build_image(plan, client, skip_unchanged=not (force or plan.no_cache or check_reproducible),
                        check_reproducible=check_reproducible)


@task(klass=FlagTask, names=NAMES, help=HELP, iterable=["config"])
@reports_errors
def build(c, name=None, tag=None, base_img=None, docker_file=None, python=None,
          musa_toolkits_url=None, mudnn_url=None, mccl_url=None, torch_whl_url=None,
          torch_musa_whl_url=None, release=False, torch_musa_tag=None, git_credential_file=None,
          keep_git=False, slim=False, build_dir=None, no_prepare=False, config=None,
          dry_run=False, no_verify=False, no_cache=False, docker=None, builder=None, no_bootstrap=False,
          require_hashes=False, ca_bundle=None, force=False, registry=None, require_registry=False,
          no_registry_check=False, check_reproducible=False):
    """Build a PyTorch image: release (torch and the extension from wheels) or dev (from source), then verify it.

    With no flags: a dev image FROM the base image `invoke build-base` made for the same Python;
    with --release alone: the CPU release image torchbake/pytorch-cpu:2.13.0-py3.11 on debian:bookworm."""
    overrides = {
        "image.name": name, "image.tag": tag, "image.base": base_img, "image.docker_file": docker_file,
        "python.version": python, "toolkits.musa_toolkits_url": musa_toolkits_url,
        "toolkits.mudnn_url": mudnn_url, "toolkits.mccl_url": mccl_url,
        "wheels.torch": torch_whl_url, "wheels.extension": torch_musa_whl_url,
        "build.variant": "release" if release else None, "build.dir": build_dir,
        "build.verify": False if no_verify else None, "build.docker": docker, "build.builder": builder,
        "sources.extension_tag": torch_musa_tag, "dev.git_credential_file": git_credential_file,
        "sources.keep_git": True if keep_git else None, "dev.slim": True if slim else None,
        "bootstrap.auto": False if no_bootstrap else None, **trust_overrides(require_hashes, ca_bundle),
        **registry_overrides(registry, require_registry, no_registry_check),
    }
    resolved = resolve_config(config, overrides)
    settings = resolved.settings()
    _no_flags_without_effect(settings.build.variant, {
        "torch_musa_tag": torch_musa_tag, "git_credential_file": git_credential_file, "keep_git": keep_git,
        "slim": slim, "torch_whl_url": torch_whl_url, "torch_musa_whl_url": torch_musa_whl_url})
    if settings.build.variant == "release":
        plan = variants.plan_release(settings, reuse_context=no_prepare, no_cache=no_cache)
    else:
        python_given = resolved.sources["python.version"] != "default"
        plan = variants.plan_dev(settings, python_given=python_given, reuse_context=no_prepare, no_cache=no_cache)
    _run(plan, settings, dry_run, force, check_reproducible)


BASE_HELP = {
    **COMMON_HELP,
    **BUILDER_HELP,
    "name": "Image name of the base image (build_base.sh -n/--name). [image] name, default from [naming]: torchbake/pytorch-<profile>",
    "tag": "Image tag (build_base.sh -t/--tag). [image] tag, default from [naming]: base-py<python>, or latest with --name",
    "sys": "OS image to start FROM, e.g. debian:trixie (build_base.sh -s/--sys). [base] sys, default the OS image of"
           " the Python (debian:bookworm for 3.11); a missing debian:/ubuntu: image is pulled or made with debootstrap",
    "python": "Python version of the environment, X.Y (build_base.sh -v/--python_version). [python] version",
    "pytorch_tag": "PyTorch git tag. [sources] pytorch_tag, default v2.0.0",
    "vision_tag": "torchvision git tag. [sources] vision_tag, default v0.15.2",
    "audio_tag": "torchaudio git tag. [sources] audio_tag, default v2.0.1",
    "source_root": "Folder holding pytorch/, vision/, audio/ clones to use if at the tags (PYTORCH_REPO_ROOT_PATH)",
    "keep_git": "Keep .git folders of the source trees in the image",
    "build_dir": "Prepare the build context in this folder and keep it (DOCKER_BUILD_DIR); default a temporary folder",
    "no_prepare": "Reuse the context already prepared in --build-dir",
    "config": "TOML config file layered over configs/defaults.toml; repeatable, later files win",
    "dry_run": "Print the plan (inputs, context, exact docker command) and touch nothing",
    "no_verify": "Skip `verify` after the build",
    "no_cache": "Build every step again, ignoring the engine's layer cache",
    "force": FORCE_HELP,
    "docker": "Docker client binary (default: auto, the first that can build with BuildKit)",
    "no_bootstrap": BOOTSTRAP_HELP,
    **TRUST_HELP,
    **REGISTRY_HELP,
}


@task(klass=FlagTask, names={"name": ["n"], "tag": ["t"], "sys": ["s"], "python": ["v", "python-version"]},
      help=BASE_HELP, iterable=["config"])
@reports_errors
def build_base(c, name=None, tag=None, sys=None, python=None, pytorch_tag=None, vision_tag=None, audio_tag=None,
               source_root=None, keep_git=False, build_dir=None, no_prepare=False, config=None, dry_run=False,
               no_verify=False, no_cache=False, docker=None, builder=None, no_bootstrap=False, require_hashes=False,
               ca_bundle=None, force=False, registry=None, require_registry=False, no_registry_check=False):
    """Build the base image for dev builds: build tools, Python, and PyTorch/vision/audio sources at pinned tags.

    `invoke build-base --python 3.10` makes torchbake/pytorch-cpu:base-py3.10 FROM ubuntu:22.04 (the
    OS image whose Python is 3.10); `invoke build --python 3.10` then finds it."""
    overrides = {
        "image.name": name, "image.tag": tag, "base.sys": sys, "python.version": python,
        "sources.pytorch_tag": pytorch_tag, "sources.vision_tag": vision_tag, "sources.audio_tag": audio_tag,
        "sources.root": source_root, "sources.keep_git": True if keep_git else None, "build.dir": build_dir,
        "build.verify": False if no_verify else None, "build.docker": docker, "build.builder": builder,
        "bootstrap.auto": False if no_bootstrap else None, **trust_overrides(require_hashes, ca_bundle),
        **registry_overrides(registry, require_registry, no_registry_check),
    }
    settings = resolve_config(config, overrides, variant="base").settings()
    _run(variants.plan_base(settings, reuse_context=no_prepare, no_cache=no_cache), settings, dry_run, force)


ns = Collection(build, build_base)
