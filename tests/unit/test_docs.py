"""The documentation: a reference that names everything the code declares, a site that builds
strictly, and a README that fits on a few screens and tells no history."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from torchbake import reference
from torchbake.configuration import accelerators, settings
from torchbake.tasks import ns


def test_the_options_reference_has_every_option_its_variable_and_its_flags():
    text = reference.options_markdown()
    for key in settings.declarations():
        assert f"### `{key}`" in text and f"`{settings.env_var_name(key)}`" in text, key
    for key, flags in reference.flags_by_option().items():
        if key not in settings.declarations():  # [toolkits] KEY: the accelerators declare those
            continue
        entry = text[text.index(f"### `{key}`"):].split("\n#", 1)[0]
        assert all(flag.spelling in entry for flag in flags), key


def test_the_tasks_reference_has_every_task_and_flag():
    text = reference.tasks_markdown()
    for name, task in ns.tasks.items():
        assert f"## `invoke {name}`" in text, name
        assert task.flags, f"{name} declares its flags with flag_task"
        part = text[text.index(f"## `invoke {name}`"):].split("\n## ", 1)[0]
        for flag in task.flags:
            assert (flag.param.upper() if flag.positional else flag.spelling) in part, (name, flag.param)


def test_the_exit_codes_reference_has_every_code_an_error_class_returns():
    text = reference.exit_codes_markdown()
    codes = {cls.exit_code for cls in reference.exit_codes().values() for cls in cls}
    assert codes == set(range(1, 12))
    for code in (0, *codes, 130, 143):
        assert f"| {code} |" in text, code
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    for code in codes:
        assert re.search(rf"^## {code}:", page, re.M), f"troubleshooting says nothing of exit {code}"


def test_the_accelerators_reference_has_every_bundled_accelerator():
    text = reference.accelerators_markdown()
    for name, accelerator in accelerators.bundled().items():
        assert f"## `{name}`" in text and all(f"`[toolkits] {t.key}`" in text for t in accelerator.toolkits)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as the README says to build it (strictly, offline), once for the tests that read it."""
    where = tmp_path_factory.mktemp("docs") / "site"
    built = subprocess.run(["bash", "scripts/docs.sh", "build", str(where)], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stdout + built.stderr
    return where


def test_the_site_builds_strictly_with_the_generated_reference(site):
    options = (site / "reference" / "options" / "index.html").read_text()
    assert "TORCHBAKE_IMAGE_PLATFORMS" in options and "<!-- reference:" not in options
    assert (site / "reference" / "exit-codes" / "index.html").is_file()


def test_one_search_finds_every_option_flag_exit_code_and_accelerator(site):
    """The site's own search index (what its search box reads) has a section per option, task,
    exit code and accelerator, so one search lands on it."""
    entries = json.loads((site / "search" / "search_index.json").read_text())["docs"]
    titles = {re.sub(r"<[^>]+>", "", entry["title"]): entry for entry in entries}
    assert not [key for key in settings.declarations() if key not in titles]
    assert not [name for name in ns.tasks if f"invoke {name}" not in titles]
    for name, task in ns.tasks.items():
        text = titles[f"invoke {name}"]["text"]
        assert all((flag.param.upper() if flag.positional else flag.spelling) in text for flag in task.flags), name
    assert not [name for name in accelerators.bundled() if name not in titles]
    codes = {cls.exit_code for classes in reference.exit_codes().values() for cls in classes}
    assert not [code for code in codes if not any(title.startswith(f"{code}:") for title in titles)]


def test_a_broken_link_fails_the_site(tmp_path):
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(docs)], check=True)
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[gone](no-such-page.md#nowhere)\n")
    config = (ROOT / "mkdocs.yml").read_text().replace("docs/hooks.py", str(docs / "hooks.py"))
    (tmp_path / "mkdocs.yml").write_text(config)
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(tmp_path / "site")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert built.returncode != 0 and "no-such-page.md" in built.stdout + built.stderr


HISTORY = re.compile(r"\b(issues? \d+|runs? \d+ to \d+|stop \d+|earlier that day|the day before)\b", re.I)


@pytest.mark.parametrize("path", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))])
def test_no_page_tells_the_history_of_the_projects_development(path):
    found = HISTORY.findall((ROOT / path).read_text())
    assert not found, f"{path}: {found[:5]}"


def test_the_readme_fits_on_a_few_screens_and_names_every_exit_code():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    listed = text[text.index("## Exit codes"):]
    codes = {cls.exit_code for classes in reference.exit_codes().values() for cls in classes}
    assert not [code for code in codes if not re.search(rf"(?<![\d/]){code} ", listed)]


def test_the_docs_script_is_the_command_the_readme_names_and_refuses_what_it_does_not_know():
    assert "bash scripts/docs.sh" in (ROOT / "README.md").read_text()
    wrong = subprocess.run(["bash", "scripts/docs.sh", "publish"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "usage: bash scripts/docs.sh" in wrong.stderr


def test_the_docs_script_never_builds_over_a_folder_of_the_users(tmp_path, site):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine")
    for target in (notes, notes / "keep.txt"):
        refused = subprocess.run(["bash", "scripts/docs.sh", "build", str(target)], cwd=ROOT, capture_output=True,
                                 text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert refused.returncode == 2 and f"{target} is not an empty folder" in refused.stderr, refused.stderr
    assert (notes / "keep.txt").read_text() == "mine"
    again = subprocess.run(["bash", "scripts/docs.sh", "build", str(site)], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)  # a site built before is built again
    assert again.returncode == 0, again.stderr
    assert (site / "search" / "search_index.json").is_file()


def test_the_layout_names_every_module():
    layout = (ROOT / "docs" / "development.md").read_text()
    modules = [path.relative_to(ROOT).as_posix() for path in (ROOT / "torchbake").rglob("*.py")]
    packages = [path.relative_to(ROOT).parent.as_posix() for path in (ROOT / "torchbake").glob("*/__init__.py")]
    missing = ([name for name in modules if not name.endswith("/__init__.py") and f"`{name}`" not in layout]
               + [name for name in packages if f"**`{name}/`**" not in layout])
    assert not missing, f"docs/development.md's Layout lacks {missing}"
