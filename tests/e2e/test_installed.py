"""torchbake as other teams get it: its wheel (built here, offline) installed each way the README
names, outside the checkout: pip into a fresh venv and `uv tool install` (pipx, the README's own
way: test_as_typed follows the "your own repository" page as typed, which installs with pipx and
builds with it); a team's own repository as the project. pip compiles the installed .py files
(``__pycache__/`` beside the in-image scripts), uv does not: each is built with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support import DEV_CACHE

from .helpers import docker, labels, make_wheel

UV = Path(sys.executable).parent / "uv"  # the pinned uv of the test tools (pyproject.toml [test])
# torchbake's dependencies as wheels: scripts/setup.sh fills this folder once per machine
DEPENDENCY_WHEELS = Path(os.environ.get("TORCHBAKE_DEV_WHEELS") or DEV_CACHE / "wheels")


def run(argv: list, *, cwd: Path, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHBAKE_", "VIRTUAL_ENV", "UV_"))}
    return subprocess.run([str(a) for a in argv], cwd=cwd, env={**clean, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """torchbake's wheel, built offline from a copy of the checkout's files (tests aside)."""
    assert any(DEPENDENCY_WHEELS.glob("invoke-*.whl")), f"{DEPENDENCY_WHEELS} has no wheels: run scripts/setup.sh"
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    listed = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).stdout.split()
    for name in listed:
        if not name.startswith("tests/") and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
    built = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                 "--wheel-dir", out, source], cwd=source)
    assert built.returncode == 0, built.stdout + built.stderr
    return next(out.glob("torchbake-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with torchbake installed by pip from its wheel and the dependency wheels,
    offline (pip compiles the package's .py files, the in-image scripts' included)."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=venv.parent)  # pip comes as a dependency
    assert made.returncode == 0, made.stderr
    done = run([sys.executable, "-m", "pip", "--python", venv / "bin/python", "install", "--quiet",
                "--disable-pip-version-check", "--no-index", "--find-links", DEPENDENCY_WHEELS, wheel], cwd=venv.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(venv.glob("lib/python*/site-packages/torchbake/_data/docker/common/__pycache__"))  # as users have it
    return venv / "bin"


@pytest.fixture(scope="module")
def uv_tool_installed(wheel, tmp_path_factory) -> Path:
    """torchbake installed by `uv tool install --from WHEEL torchbake`, offline."""
    home = tmp_path_factory.mktemp("uv-tool")
    env = {"UV_TOOL_DIR": str(home / "tools"), "UV_TOOL_BIN_DIR": str(home / "bin"), "UV_CACHE_DIR": str(home / "cache")}
    done = run([UV, "tool", "install", "--offline", "--no-index", "--find-links", DEPENDENCY_WHEELS, "--python",
                sys.executable, "--from", wheel, "torchbake"], cwd=home, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return home / "bin"


def test_the_wheel_holds_the_whole_package_and_its_files(installed, tmp_path):
    probe = ("import torchbake, torchbake.variants, torchbake.core.data as d; print(torchbake.__file__);"
             " print(sorted(torchbake.variants.VARIANTS)); print(d.ROOT); print(sorted(p.name for p in d.COMMON_DIR.iterdir()))")
    found = run([installed / "python", "-c", probe], cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    package, kinds, root, scripts = found.stdout.splitlines()
    assert package.startswith(str(installed.parent)) and not package.startswith(str(ROOT))  # not the checkout
    assert kinds == "['base', 'dev', 'release']"
    assert root == str(Path(package).parent / "_data")
    assert "install_wheels.sh" in scripts and "record_installed.sh" in scripts


def test_the_command_works_from_any_folder_with_the_tasks_and_flags_invoke_shows_here(installed, tmp_path):
    import tasks

    listed = run([installed / "torchbake", "--list"], cwd=Path("/"))
    assert listed.returncode == 0, listed.stderr
    assert sorted(line.split()[0] for line in listed.stdout.splitlines()[2:] if line.startswith("  ") and
                  not line.startswith("   ")) == sorted(tasks.ns.task_names)
    version = run([installed / "torchbake", "--version"], cwd=tmp_path)
    assert version.stdout.strip() == "torchbake 0.1.0", version.stdout + version.stderr
    helped = run([installed / "torchbake", "--help", "build"], cwd=tmp_path)
    flags = {a.name.replace("_", "-") for a in tasks.ns.tasks["build"].get_arguments()}
    assert helped.returncode == 0 and all(f"--{flag}" in helped.stdout for flag in flags), helped.stdout
    assert "`torchbake build-base`" in helped.stdout and "`invoke " not in helped.stdout  # hints name the command
    refused = run([installed / "torchbake", "build", "--no-such-flag"], cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("torchbake: error: No idea what '--no-such-flag' is! `torchbake --help build`"
                                      " lists its flags.")


def test_a_project_file_with_an_unknown_key_is_a_clear_error_naming_it(installed, tmp_path):
    (tmp_path / "torchbake.toml").write_text('[image]\ncolour = "blue"\n')
    result = run([installed / "torchbake", "show-config"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"torchbake: project file {tmp_path}/torchbake.toml\n"
                                    f"torchbake: error: {tmp_path}/torchbake.toml: unknown option 'image.colour'."), \
        result.stderr


def test_a_teams_repository_builds_verifies_and_shows_its_image(installed, tmp_path, base_image, tiny_torch, tb_env,
                                                               run_id):
    """torchbake.toml: a release of the stand-in torch with one companion of the team's (a wheel in
    the repository's wheels/ folder) and [image] steps that add a file."""
    project = tmp_path / "team"
    (project / "wheels").mkdir(parents=True)
    make_wheel(project / "wheels", "teamlib", "1.0", [], {"teamlib/__init__.py": "WHO = 'team'\n"})
    (project / "image").mkdir()
    (project / "image/steps.dockerfile").write_text("RUN echo built-by-the-team > /etc/team-marker\n")
    image = f"torchbake-test/team:{run_id}"
    (project / "torchbake.toml").write_text(
        f'[image]\nname = "torchbake-test/team"\ntag = "{run_id}"\nbase = "{base_image}"\n'
        'steps = "image/steps.dockerfile"\n[build]\nvariant = "release"\n'
        f'[wheels]\ntorch = "{tiny_torch}"\nextra = ["teamlib==1.0"]\nfind_links = ["wheels"]\n')
    (project / "sub/folder").mkdir(parents=True)
    try:
        built = run([installed / "torchbake", "build"], cwd=project, env=tb_env)
        assert built.returncode == 0, built.stdout + built.stderr
        assert f"Built {image}" in built.stdout and "verify" in built.stdout
        assert docker("run", "--rm", image, "cat", "/etc/team-marker").stdout == "built-by-the-team\n"
        imported = docker("run", "--rm", image, "python", "-c", "import teamlib; print(teamlib.WHO)")
        assert imported.stdout == "team\n"
        assert labels(image)["torchbake.version"] == "0.1.0"  # the installed distribution's

        shown = run([installed / "torchbake", "show-config", "--format", "toml"], cwd=project / "sub/folder")
        assert shown.returncode == 0, shown.stderr
        assert shown.stderr == f"torchbake: project file {project}/torchbake.toml\n"  # found above: named
        assert f'steps = "{project}/image/steps.dockerfile"' in shown.stdout
        table = run([installed / "torchbake", "show-config"], cwd=project / "sub/folder")
        assert str(project / "torchbake.toml")[:40] in table.stdout  # the source column names the file
        described = run([installed / "torchbake", "show-build", image], cwd=tmp_path, env=tb_env)
        assert described.returncode == 0 and "│ torchbake " in described.stdout and "0.1.0" in described.stdout

        (project / "image/steps.dockerfile").write_text("RUN echo changed > /etc/team-marker\n")
        again = run([installed / "torchbake", "build", "--no-verify"], cwd=project, env=tb_env)
        assert again.returncode == 0 and "unchanged" not in again.stdout  # the steps are part of the input hash
        assert docker("run", "--rm", image, "cat", "/etc/team-marker").stdout == "changed\n"
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_the_command_installed_by_uv_tool_builds_and_verifies_a_teams_image(uv_tool_installed, tmp_path, base_image,
                                                                            tiny_torch, tb_env, run_id):
    """The team build with the command `uv tool install` made (the pip venv's is the test above;
    pipx's, the README's own way, is test_as_typed's "your own repository" page as typed: the
    wheel installed by pipx builds, verifies and runs the page's image)."""
    method, tools = "uv tool", uv_tool_installed
    version = run([tools / "torchbake", "--version"], cwd=Path("/"))
    assert version.stdout.strip() == "torchbake 0.1.0", version.stdout + version.stderr
    # the profiles it ships, named by name outside any checkout: the profile's values, not its name only
    cuda = run([tools / "torchbake", "show-config", "--config", "cuda", "--format", "toml"], cwd=tmp_path)
    assert cuda.returncode == 0 and 'torch_cuda_arch_list = "7.5;8.0;8.6;8.9;9.0"' in cuda.stdout, cuda.stdout + cuda.stderr
    name = f"torchbake-test/team-{method.replace(' ', '-')}"
    (tmp_path / "torchbake.toml").write_text(
        f'[image]\nname = "{name}"\ntag = "{run_id}"\nbase = "{base_image}"\n[build]\nvariant = "release"\n'
        f'[wheels]\ntorch = "{tiny_torch}"\n')
    try:
        built = run([tools / "torchbake", "build"], cwd=tmp_path, env=tb_env)
        assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
        assert f"Built {name}:{run_id}" in built.stdout and "verify" in built.stdout, built.stdout[-3000:]
        assert labels(f"{name}:{run_id}")["torchbake.version"] == "0.1.0"
    finally:
        docker("image", "rm", "--force", f"{name}:{run_id}", check=False)


TEAM_TASKS = '''"""A team's tasks beside torchbake's."""

from invoke import task

from torchbake.tasks import ns


@task
def hello(c):
    """Say hello from the team."""
    print("hello from the team")


ns.add_task(hello)
'''


def test_a_teams_tasks_py_adds_its_own_task_beside_torchbakes(installed, tmp_path):
    (tmp_path / "tasks.py").write_text(TEAM_TASKS)
    listed = run([installed / "invoke", "--list"], cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "hello" in listed.stdout and "build-all" in listed.stdout
    assert run([installed / "invoke", "hello"], cwd=tmp_path).stdout == "hello from the team\n"
    planned = run([installed / "invoke", "build", "--release", "--dry-run"], cwd=tmp_path)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "Plan for torchbake/pytorch-cpu:2.13.0-py3.11 (release, profile cpu)" in planned.stdout
