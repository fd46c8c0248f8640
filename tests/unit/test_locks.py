"""Lock files read with packaging's PEP 751 model: the wheels a lock selects for an image's Python
and platform, what a configuration that moved differs in, and the words a changed lock is told in."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import run_invoke
from torchbake.core.errors import ConfigurationError
from torchbake.inputs import locks

AMD64, ARM64 = ("manylinux_2_28_x86_64",), ("manylinux_2_28_aarch64",)
SHA = {"x86": "1" * 64, "arm": "2" * 64, "pure": "3" * 64}


def lock_text(tool: str = "", extra: str = "") -> str:
    return f'''lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.11"

[[packages]]
name = "numpy"
version = "2.3.0"
wheels = [
  {{ url = "https://files.example/numpy-2.3.0-cp311-cp311-manylinux_2_28_x86_64.whl", hashes = {{ sha256 = "{SHA['x86']}" }} }},
  {{ url = "https://files.example/numpy-2.3.0-cp311-cp311-manylinux2014_aarch64.whl", hashes = {{ sha256 = "{SHA['arm']}" }} }},
]

[[packages]]
name = "typing-extensions"
version = "4.16.0"
wheels = [{{ url = "https://files.example/typing_extensions-4.16.0-py3-none-any.whl", hashes = {{ sha256 = "{SHA['pure']}" }} }}]
{extra}
[tool.torchbake]
requirements = ["numpy==2.3.0"]
python = "3.11"
platform = "linux/amd64"
{tool}'''


def write(folder: Path, text: str) -> Path:
    path = locks.path_for(folder, "team/cpu:1", "linux/amd64")
    path.write_text(text)
    return path


def test_a_lock_selects_each_projects_wheel_for_the_images_platform(tmp_path):
    path = write(tmp_path, lock_text())
    assert path.name == "pylock.team-cpu-1-linux-amd64.toml"
    found = locks.read(path, "3.11", AMD64)
    assert [(w.name, w.version, w.sha256) for w in found.wheels] == [("numpy", "2.3.0", SHA["x86"]),
                                                                     ("typing-extensions", "4.16.0", SHA["pure"])]
    assert locks.read(path, "3.11", ARM64).wheels[0].file_name == "numpy-2.3.0-cp311-cp311-manylinux2014_aarch64.whl"
    assert locks.read(tmp_path / "pylock.none.toml", "3.11", AMD64) is None


def test_of_a_releases_wheels_the_lock_gives_the_one_an_installer_prefers(tmp_path):
    """ninja 1.11.1 has a manylinux1 and a manylinux_2_12 wheel for x86_64 (a uv lock lists
    both): the newer manylinux is pip's and uv's choice, and the manylinux1 binary crashes on
    bookworm (CMake: "'ninja' '--version' failed"). Not whichever sorts first by name."""
    ninja = ('\n[[packages]]\nname = "ninja"\nversion = "1.11.1"\nwheels = [\n'
             '  { url = "https://files.example/ninja-1.11.1-py2.py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64.whl",'
             f' hashes = {{ sha256 = "{"5" * 64}" }} }},\n'
             '  { url = "https://files.example/ninja-1.11.1-py2.py3-none-manylinux_2_5_x86_64.manylinux1_x86_64.whl",'
             f' hashes = {{ sha256 = "{"6" * 64}" }} }},\n]\n')
    for order in (ninja, ninja.replace("manylinux_2_12", "@").replace("manylinux_2_5", "manylinux_2_12").replace(
            "manylinux2010", "#").replace("manylinux1", "manylinux2010").replace("@", "manylinux_2_5").replace("#", "manylinux1")):
        found = locks.read(write(tmp_path, lock_text(extra=order)), "3.11", AMD64)
        (chosen,) = [w for w in found.wheels if w.name == "ninja"]
        assert chosen.file_name == "ninja-1.11.1-py2.py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64.whl"


@pytest.mark.parametrize(("text", "says"), [
    ("not toml at all", "is not a lock torchbake can use"),
    (lock_text(extra='\n[[packages]]\nname = "sdistonly"\nversion = "1.0"\nsdist = { url = "https://files.example/'
                     'sdistonly-1.0.tar.gz", hashes = { sha256 = "' + "4" * 64 + '" } }\n'),
     "sdistonly is locked to something torchbake does not install"),
])
def test_a_lock_torchbake_cannot_install_from_is_refused_naming_it(tmp_path, text, says):
    path = write(tmp_path, text)
    with pytest.raises(ConfigurationError, match=says) as caught:
        locks.read(path, "3.11", AMD64)
    assert str(path) in str(caught.value) and "invoke lock" in str(caught.value)


def test_what_a_moved_configuration_differs_in_is_said_in_words(tmp_path):
    lock = locks.read(write(tmp_path, lock_text()), "3.11", AMD64)
    assert locks.mismatch(lock, ["numpy==2.3.0"], "3.11", "linux/amd64") == []
    assert locks.mismatch(lock, ["numpy==2.3.0", "sympy"], "3.12", "linux/arm64") == [
        "requirements: +sympy", "Python: 3.11 → 3.12", "platform: linux/amd64 → linux/arm64"]
    assert locks.mismatch(lock, [], "3.11", "linux/amd64") == ["requirements: -numpy==2.3.0"]


def test_a_changed_lock_is_told_as_invoke_diff_tells_a_changed_image(tmp_path):
    old = locks.read(write(tmp_path, lock_text()), "3.11", AMD64)
    new = locks.read(write(tmp_path, lock_text().replace("4.16.0", "4.17.1").replace("numpy-2.3.0", "numpy-2.4.0")
                           .replace('"2.3.0"', '"2.4.0"')), "3.11", AMD64)
    assert locks.changes(old, new) == [("numpy", "2.3.0", "2.4.0"), ("typing-extensions", "4.16.0", "4.17.1")]
    assert locks.changes(None, old) == [("numpy", "", "2.3.0"), ("typing-extensions", "", "4.16.0")]


@pytest.mark.parametrize(("tags", "platform"), [(AMD64, "x86_64-manylinux_2_28"), (("manylinux2014_aarch64",),
                                                "aarch64-manylinux2014"), (("linux_x86_64",), "x86_64-unknown-linux-gnu")])
def test_uv_locks_for_the_images_platform_tags(tags, platform):
    assert locks.uv_platform(tags) == platform


@pytest.mark.parametrize(("args", "says"), [
    (("lock",), "invoke lock locks release images"),
    (("lock", "--release", "--upgrade", "--upgrade-package", "numpy"), "--upgrade lets every version move"),
    (("lock", "--release", "--only", "x"), "--only picks cells of the matrix: add --matrix"),
    (("build", "--release", "--locked"), "build.locked: torchbake/pytorch-cpu:2.13.0-py3.11 cannot be built as locked:"
                                         " it has no lock"),
    (("build-base", "--locked"), "build.locked: torchbake/pytorch-cpu:base-py3.11 cannot be built as locked: it has no"
                                 " lock"),
    (("build-base", "--locked"), "`invoke lock --base`"),
    (("lock", "--base", "--release"), "--base locks the base image build-base makes, --release a release image"),
    (("lock", "--base", "--base-img", "debian:bookworm"), "--base-img names a release image's FROM image; a base"
                                                          " image's is --sys"),
    (("lock", "--base", "--matrix"), "--matrix locks the matrix's base cells with its release cells: leave out --base"),
    (("lock", "--release", "--sys", "debian:bookworm"), "--sys names the FROM image of the base image build-base"
                                                        " makes: add --base"),
])
def test_lock_flags_are_refused_before_any_work_naming_what_is_wrong(args, says, tmp_path):
    result = run_invoke(*args, env={"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "c"),
                                    "TORCHBAKE_BUILD_LOCKS": str(tmp_path / "locks")})
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "c").exists() and not (tmp_path / "locks").exists()


def test_a_locks_folder_that_is_a_file_is_refused_naming_it(tmp_path):
    notes = tmp_path / "notes"
    notes.write_text("mine\n")
    result = run_invoke("lock", "--release", env={"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "c"),
                                                  "TORCHBAKE_BUILD_LOCKS": str(notes)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"build.locks {notes} (set by [build] locks" in result.stderr and "is a file, not a folder" in result.stderr
    assert notes.read_text() == "mine\n" and "Traceback" not in result.stderr


def test_upgrade_package_naming_a_debian_package_says_the_debian_versions_move_with_upgrade(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir()
    path = locks.path_for(folder, "team/cpu:1", "linux/amd64")
    path.write_text(lock_text('[tool.torchbake.debs]\nprocps = "2:4.0.2-3"\n'))
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "c"), "TORCHBAKE_BUILD_LOCKS": str(folder),
           "TORCHBAKE_BUILD_DOCKER": "/no/such/docker"}
    result = run_invoke("lock", "--release", "--name", "team/cpu", "--tag", "1", "--upgrade-package", "procps",
                        env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (f"--upgrade-package procps: a Debian package of {path}; the Debian versions move together, with --upgrade"
            in result.stderr)
    assert path.read_text() == lock_text('[tool.torchbake.debs]\nprocps = "2:4.0.2-3"\n')


def test_an_image_whose_lock_file_name_is_another_images_neither_overwrites_nor_follows_that_lock(tmp_path):
    """A lock's file name folds case and punctuation (team/cpu:v1.0 and team/cpu:V1-0 share one): the
    lock records the image it was made for, `invoke lock` of the other image is refused before any
    work (the lock kept as it was), and the other image's build does not take it for its own."""
    folder = tmp_path / "locks"
    folder.mkdir()
    path = locks.path_for(folder, "team/cpu:v1.0", "linux/amd64")
    assert path == locks.path_for(folder, "team/cpu:V1-0", "linux/amd64")
    text = lock_text('image = "team/cpu:v1.0"\n')
    path.write_text(text)
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "c"), "TORCHBAKE_BUILD_LOCKS": str(folder),
           "TORCHBAKE_BUILD_DOCKER": "/no/such/docker"}
    result = run_invoke("lock", "--release", "--name", "team/cpu", "--tag", "V1-0", env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (f"{path} is the lock of team/cpu:v1.0; team/cpu:V1-0's lock would take its place (a lock's file name"
            " folds case and punctuation)." in " ".join(result.stderr.split()))
    assert f"If team/cpu:v1.0 is built no more, remove {path} and lock again." in " ".join(result.stderr.split())
    assert path.read_text() == text
    lock = locks.read(path, "3.11", AMD64)
    assert locks.mismatch(lock, ["numpy==2.3.0"], "3.11", "linux/amd64", image="team/cpu:v1.0") == []
    assert locks.mismatch(lock, ["numpy==2.3.0"], "3.11", "linux/amd64", image="team/cpu:V1-0") == [
        "image: team/cpu:v1.0 (its file name is this image's too)"]
    older = locks.read(write(tmp_path, lock_text()), "3.11", AMD64)  # made before locks recorded their image
    assert locks.mismatch(older, ["numpy==2.3.0"], "3.11", "linux/amd64", image="team/cpu:1") == []


def test_a_locked_wheel_of_a_private_index_is_fetched_with_that_indexs_credentials_and_no_other():
    """uv writes a lock's URLs without credentials; a build sends the configured index's to its host
    (as pip does to the files an index links), never to another host."""
    options = SimpleNamespace(index_url="", extra_index_urls=["https://builder:s3cret@pkgs.example:8443/simple"],
                              find_links=["https://other.example/links"])  # the [wheels] options it reads
    assert (locks.index_credentials("https://pkgs.example:8443/files/a-1.0-py3-none-any.whl", options)
            == "https://builder:s3cret@pkgs.example:8443/files/a-1.0-py3-none-any.whl")
    for elsewhere in ("https://pkgs.example/files/a.whl", "http://pkgs.example:8443/files/a.whl",
                      "https://other.example/a.whl", "https://me:mine@pkgs.example:8443/a.whl"):
        assert locks.index_credentials(elsewhere, options) == elsewhere


def test_a_floating_builds_hint_is_the_lock_command_with_the_builds_own_flags_as_typed(monkeypatch):
    """`invoke lock` takes the flags that name the image and its inputs; the build's others
    (--push, --sign-key KEY) are left out, with their values, and invoke's own options too."""
    from torchbake.variants import locking

    typed = ["invoke", "--search-root", "/repo", "build", "-r", "--name=team/x", "--tag", "t", "--push",
             "--sign-key", "k.pem", "--config", "a.toml", "--python", "3.10", "--platform", "linux/arm64"]
    monkeypatch.setattr("sys.argv", typed)
    assert locking.lock_command("invoke lock") == ("invoke lock -r --name=team/x --tag t --config a.toml --python 3.10"
                                                   " --platform linux/arm64")
    monkeypatch.setattr("sys.argv", ["invoke", "build", "--torch-whl-url", "https://me:s3cret@wheels.invalid/t.whl"])
    hint = locking.lock_command("invoke lock")
    # a URL's credentials are printed nowhere; nor a masked copy that would send *** as the password when typed
    assert "s3cret" not in hint and "***" not in hint
    assert hint == "invoke lock --torch-whl-url '<as you typed it: it holds a secret>'"
    monkeypatch.setattr("sys.argv", ["invoke", "build", "--torch-whl-url=https://me:s3cret@wheels.invalid/t.whl"])
    assert locking.lock_command("invoke lock") == "invoke lock '--torch-whl-url=<as you typed it: it holds a secret>'"
    monkeypatch.setattr("sys.argv", ["invoke", "build-base", "--python", "3.10", "--base"])
    assert locking.lock_command("invoke lock --base") == "invoke lock --base --python 3.10"
    # a cell of build-all's matrix (a base cell too: plain `invoke lock --base` would lock the default base)
    monkeypatch.setattr("sys.argv", ["invoke", "build-all", "--config", "nightly.toml", "--only", "x*", "--push",
                                     "--config=vendor.toml"])
    for command in ("invoke lock", "invoke lock --base"):
        assert locking.lock_command(command) == "invoke lock --matrix --config nightly.toml --config=vendor.toml"


def test_uv_is_given_the_indexes_in_its_environment_never_on_its_command_line(tmp_path, monkeypatch):
    """An index URL may carry a password: `ps` shows every process's arguments to every user, so the
    lock's uv reads the indexes from its environment."""
    from torchbake.adapters import command

    seen = {}

    def run(argv, *, env, **kwargs):
        seen.update(argv=[str(a) for a in argv], env=env)
        out = Path(seen["argv"][seen["argv"].index("--output-file") + 1])
        out.write_text('lock-version = "1.0"\ncreated-by = "uv"\n')
        return SimpleNamespace(returncode=0, output="")

    monkeypatch.setattr(command, "run", run)
    monkeypatch.setattr(locks, "_pip_configuration", lambda: {})
    options = SimpleNamespace(index_url="https://builder:s3cret@pkgs.example/simple", extra_index_urls=[],
                              find_links=[], platforms=("manylinux_2_28_x86_64",))
    locks.make(Path("uv"), ["numpy"], "3.11", "linux/amd64", options, target=tmp_path / "pylock.x.toml",
               upgrade=False, log_file=None)
    assert not [a for a in seen["argv"] if "s3cret" in a or "pkgs.example" in a], seen["argv"]
    assert seen["env"]["UV_INDEX_URL"] == "https://builder:s3cret@pkgs.example/simple"
    assert "--exclude-newer" not in seen["argv"]
    # a base's lock: its build requirements as of their day, its developers' tools current
    locks.make(Path("uv"), ["cmake", "pytest"], "3.11", "linux/amd64", options, target=tmp_path / "pylock.x.toml",
               upgrade=False, log_file=None, day="2023-03-15", current=["pytest"])
    dated = seen["argv"][seen["argv"].index("--exclude-newer"):][:4]
    assert dated[:3] == ["--exclude-newer", "2023-03-16", "--exclude-newer-package"] and dated[3].startswith("pytest=")


def test_a_bases_lock_holds_only_for_the_day_its_build_requirements_were_resolved_as_of():
    """A lock made as of the tag's day is not the closure of a base asked as of another day: the
    build would follow other tools than the plan says."""
    lock = locks.Lock(Path("pylock.base.toml"), locks.made_for(["cmake"], "3.11", "linux/amd64", as_of="tag"), (), "")
    assert locks.mismatch(lock, ["cmake"], "3.11", "linux/amd64", "tag") == []
    assert locks.mismatch(lock, ["cmake"], "3.11", "linux/amd64", "2023-01-01") == [
        "build requirements as of: tag → 2023-01-01"]
    older = locks.Lock(Path("pylock.release.toml"), locks.made_for(["numpy"], "3.11", "linux/amd64"), (), "")  # a release's: none
    assert locks.mismatch(older, ["numpy"], "3.11", "linux/amd64") == []


def test_a_locked_debian_version_the_mirror_lacks_is_asked_of_the_from_images_own_platform():
    """The build's check of its lock's Debian versions runs apt in the FROM image of the image's
    platform (another machine's, emulated: the same container test_platforms' arm64 lock asks) and
    names each version the mirror lacks (exit 3, before anything is prepared: test_locks' real one)."""
    from torchbake.adapters.command import CommandResult
    from torchbake.core.errors import DownloadError
    from torchbake.variants.locking import Lockable

    asked = []

    class Client:
        def run_capture(self, image, argv, **options):
            asked.append((image, options))
            return CommandResult(("docker",), 100, "E: Version '2~gone1' for 'procps' was not found\n")

    plan = SimpleNamespace(deb_pins=lambda: {"procps": "2~gone1"}, base_image="team/base:arm64", platform="linux/arm64",
                           build_options=SimpleNamespace(network=""), lock_path="locks/l.toml",
                           lock_command="invoke lock --platform linux/arm64")
    with pytest.raises(DownloadError, match=r"does not have \(now\): procps 2~gone1\. Nothing was built"):
        Lockable.check_before_build(plan, Client())
    assert asked == [("team/base:arm64", {"entrypoint": "bash", "network": None, "platform": "linux/arm64"})]
