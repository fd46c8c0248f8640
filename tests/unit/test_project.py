"""A team's repository as the project: torchbake.toml (or [tool.torchbake]) found from the current
folder up, a layer between the defaults and --config, its relative paths its own folder's."""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import run_invoke
from torchbake.configuration import project
from torchbake.core import output
from torchbake.core.errors import ConfigurationError
from torchbake.inputs.context import render_dockerfile
from torchbake.planning import config


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_first_project_file_from_the_folder_up_is_the_project(tmp_path):
    write(tmp_path / "torchbake.toml", '[python]\nversion = "3.12"\n')
    write(tmp_path / "team/pyproject.toml", '[project]\nname = "team"\n')  # no [tool.torchbake]: not a project
    (tmp_path / "team/deep/er").mkdir(parents=True)
    found = project.find(tmp_path / "team/deep/er")
    assert found is not None and found.path == tmp_path / "torchbake.toml" and found.source == str(found.path)
    write(tmp_path / "team/pyproject.toml", '[project]\nname = "team"\n[tool.torchbake.python]\nversion = "3.10"\n')
    found = project.find(tmp_path / "team/deep/er")
    assert found.path == tmp_path / "team/pyproject.toml" and found.data == {"python": {"version": "3.10"}}
    assert found.source == f"{tmp_path / 'team/pyproject.toml'} [tool.torchbake]"
    assert project.find(tmp_path.parent) is None or project.find(tmp_path.parent).path != found.path


def test_relative_paths_are_the_project_files_and_requirements_stay_requirements(tmp_path):
    found = project.Project(tmp_path / "torchbake.toml")
    write(tmp_path / "wheel-here.whl", "")
    assert found.anchored("path", "docker/steps") == str(tmp_path / "docker/steps")
    assert found.anchored("path", "/abs/file") == "/abs/file" and found.anchored("path", "~/x") == "~/x"
    assert found.anchored("location", "torch==2.13.0") == "torch==2.13.0"
    assert found.anchored("location", "https://h.invalid/t.whl") == "https://h.invalid/t.whl"
    assert found.anchored("location", "wheels/t-1-py3-none-any.whl") == str(tmp_path / "wheels/t-1-py3-none-any.whl")
    assert found.anchored("location", "wheel-here.whl") == str(tmp_path / "wheel-here.whl")
    assert found.anchored("path", ["wheels", "https://h.invalid/simple"]) == [str(tmp_path / "wheels"),
                                                                             "https://h.invalid/simple"]


def test_the_project_is_a_layer_under_config_files_with_its_paths_anchored(tmp_path):
    steps = write(tmp_path / "team/image/steps.dockerfile", "RUN echo team > /etc/team\n")
    write(tmp_path / "team/wheels/.keep", "")
    found = project.Project(write(tmp_path / "team/torchbake.toml",
                                  '[python]\nversion = "3.12"\n[image]\nsteps = "image/steps.dockerfile"\ntag = "t"\n'
                                  '[wheels]\nfind_links = ["wheels"]\nextra = ["numpy", "teamlib==1.0"]\n'
                                  '[matrix]\npythons = ["3.12"]\n'),  # build-all's: other tasks pass it by
                            project.find(tmp_path / "team").data)
    later = write(tmp_path / "later.toml", '[image]\ntag = "from-config"\n')
    resolved = config.resolve([later], {}, project=found)
    assert resolved.values["image.steps"] == str(steps)
    assert resolved.values["wheels.find_links"] == [str(tmp_path / "team/wheels")]
    assert resolved.values["wheels.extra"] == ["numpy", "teamlib==1.0"]
    assert (resolved.values["python.version"], resolved.sources["python.version"]) == ("3.12", str(found.path))
    assert (resolved.values["image.tag"], resolved.sources["image.tag"]) == ("from-config", str(later))


def test_a_mistake_in_the_project_file_names_the_file(tmp_path):
    found = project.Project(tmp_path / "torchbake.toml", {"image": {"colour": "blue"}})
    with pytest.raises(ConfigurationError, match=rf"^{tmp_path}/torchbake.toml: unknown option 'image.colour'"):
        config.resolve([], {}, project=found)
    write(tmp_path / "bad/torchbake.toml", "[image\n")
    with pytest.raises(ConfigurationError, match=rf"^Project file {tmp_path}/bad/torchbake.toml is not valid TOML"):
        project.find(tmp_path / "bad")


def test_show_config_names_the_project_file_from_a_subfolder(tmp_path):
    write(tmp_path / "torchbake.toml", '[python]\nversion = "3.12"\n')
    (tmp_path / "sub").mkdir()
    result = run_invoke("show-config", cwd=tmp_path / "sub")
    assert result.returncode == 0, result.stderr
    rows = [[cell.strip() for cell in line.split("│")[1:4]] for line in result.stdout.splitlines() if line.count("│") == 4]
    start = next(i for i, row in enumerate(rows) if row[0] == "python.version")
    cells = [rows[start], *itertools.takewhile(lambda row: not row[0], rows[start + 1:])]  # a long source folds
    assert cells[0][1] == '"3.12"'
    assert str(tmp_path / "torchbake.toml") in "".join(row[2] for row in cells)


def test_image_steps_go_at_their_marker_and_a_from_line_is_refused(tmp_path):
    template = "FROM x\nRUN a\n# @torchbake-steps@\nRUN records\n"
    assert render_dockerfile(template, {}, "cpu", image_steps="RUN echo team\nENV TEAM=1\n") == (
        "FROM x\nRUN a\n# [image] steps:\nRUN echo team\nENV TEAM=1\nRUN records\n")
    assert render_dockerfile(template, {}, "cpu") == "FROM x\nRUN a\n# (no [image] steps)\nRUN records\n"
    steps = write(tmp_path / "steps", "FROM other\nRUN x\n")
    with pytest.raises(ConfigurationError, match=r"image.steps = .* is invalid: its lines are steps of torchbake's"
                                                 r" image, which has its FROM already"):
        config.resolve([], {}, {"image.steps": str(steps)})


def test_a_template_without_the_steps_line_is_refused_when_steps_are_given(tmp_path):
    steps = write(tmp_path / "steps", "RUN echo team\n")
    template = write(tmp_path / "Dockerfile.in", "FROM x\nRUN a\n")
    result = run_invoke("build", "--release", "--docker-file", str(template), "--dry-run", "--docker", "/usr/bin/docker",
                        env={"TORCHBAKE_IMAGE_STEPS": str(steps)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"Dockerfile {template} (--docker-file) has no '# @torchbake-steps@' line" in result.stderr


def test_hints_name_the_command_that_runs(monkeypatch):
    text = "Run `invoke gc --dry-run`, then `invoke build`; invoke itself is a library."
    assert output.as_typed(text) == text
    monkeypatch.setattr(output, "PROGRAM", "torchbake")
    assert output.as_typed(text) == "Run `torchbake gc --dry-run`, then `torchbake build`; invoke itself is a library."
