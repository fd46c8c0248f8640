"""The documentation: a reference that names everything the code declares, a site that builds
strictly, and a README that fits on a few screens and tells no history."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from tests.conftest import ROOT, run_invoke
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


class _PageText(HTMLParser):
    """The text a browser shows of a page: its tags dropped, its entities unescaped."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def shown(page) -> str:
    parser = _PageText()
    parser.feed(page.read_text())
    return " ".join("".join(parser.parts).split())


def as_written(text: str) -> str:
    """A declaration's text as the page should show it: whitespace joined, code spans' backticks gone."""
    return " ".join(text.replace("`", "").split())


def test_every_declared_help_and_default_reaches_the_built_page_whole(site):
    """A placeholder such as <suite> in a declaration is shown, not taken by the browser for a tag
    ("default torchbake/debian:", "pylock.-.toml"); every option's help and default, every task's
    text and every flag's help is on its built page as declared."""
    options = shown(site / "reference" / "options" / "index.html")
    cut = [key for key, declared in settings.declarations().items() if as_written(declared.help) not in options
           or (f"default: {json.dumps(declared.default)}" if declared.default not in ("", [], {}) else "default: (empty)")
           not in options]
    assert not cut, f"the options reference does not show these options' help or default whole: {cut}"
    tasks = shown(site / "reference" / "tasks" / "index.html")
    cut = [name for name, task in ns.tasks.items() if as_written(inspect.cleandoc(task.body.__doc__)) not in tasks]
    cut += [f"{name} {flag.spelling}" for name, task in ns.tasks.items() for flag in task.flags
            if as_written(flag.help) not in tasks]
    assert not cut, f"the tasks reference does not show these tasks' or flags' text whole: {cut}"


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


def test_each_exit_code_reads_as_one_description_for_the_user():
    """One sentence or two per code, from the class that sets it: no class names, no docstrings joined
    with ".;", nothing meant for the code's developers."""
    for code, classes in reference.exit_codes().items():
        setters = [cls for cls in classes if "exit_code" in vars(cls)]
        assert len(setters) == 1 and "meaning" in vars(setters[0]), f"exit {code}: one class sets it and says its meaning"
    rows = re.findall(r"^\| (\d+) \| (.*) \|$", reference.exit_codes_markdown(), re.M)
    assert len(rows) == len(reference.exit_codes()) + 3
    for code, meaning in rows:
        assert meaning.endswith(".") and not re.search(r"\.;|\*\*|``|\b[A-Z]\w+(Error|Pending)\b|\bclass\b", meaning), (code, meaning)


def test_what_an_option_decides_agrees_with_its_help():
    """An option whose help says it is in the input hash is not shown as deciding no image."""
    text = reference.options_markdown()
    for key, declared in settings.declarations().items():
        if re.search(r"\b(part of|in|counts in) the input hash", declared.help):  # not "the tag named by the input hash"
            entry = text[text.index(f"### `{key}`"):].split("\n### ", 1)[0]
            assert "- decides: no image's content" not in entry, key
    steps = text[text.index("### `image.steps`"):].split("\n### ", 1)[0]
    assert "- decides: every image (its text, as part of the Dockerfile)" in steps


def test_the_site_publishes_pages_not_its_build_hook(site):
    assert not (site / "hooks.py").exists()
    assert not [p.name for p in site.rglob("*.py")]


PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))


def _prose(path: str) -> list[str]:
    """The page's lines, code fences blanked (a `#` comment in a code block is no heading)."""
    text = (ROOT / path).read_text()
    return re.sub(r"^```.*?^```", lambda fence: "\n" * fence.group().count("\n"), text, flags=re.S | re.M).splitlines()


@pytest.mark.parametrize("path", PAGES)
def test_every_page_has_one_title(path):
    titles = [line for line in _prose(path) if re.match(r"# \S", line)]
    assert len(titles) == 1, f"{path}: {titles}"


SEED = re.compile(r"\bseeds? \d{3}\b|\bthe seeds'", re.I)


def test_no_page_or_config_names_a_seed_of_the_project():
    """The project's own history ("seed 001: the pip wheels lack sm_89") is not where users read."""
    paths = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "configs").rglob("*")]
    found = [f"{path.relative_to(ROOT)}:{number}" for path in paths if path.is_file()
             for number, line in enumerate(path.read_text().splitlines(), 1) if SEED.search(line)]
    assert not found, found


CELL_WORDS, ITEM_WORDS = 90, 150  # a table cell, a list item (with its continuation lines)


def _blocks(path: str):
    """(line, "cell" or "item", words) of each table cell and list item of the page."""
    item = None
    for number, line in enumerate(_prose(path), 1):
        if line.startswith("|") and not re.match(r"^\|[\s|:-]+\|$", line):
            yield from ((number, "cell", len(cell.split())) for cell in re.split(r"(?<!\\)\|", line.strip().strip("|")))
            item = None
        elif bullet := re.match(r"^(\s*)(?:[-*+]|\d+\.) ", line):
            if item:
                yield tuple(item[:3])
            item = [number, "item", len(line.split()) - 1, len(bullet.group())]
        elif item and line.strip() and line.startswith(" " * item[3]):
            item[2] += len(line.split())
        else:
            if item:
                yield tuple(item[:3])
            item = None
    if item:
        yield tuple(item[:3])


@pytest.mark.parametrize("path", PAGES)
def test_no_table_cell_or_list_item_is_a_wall_of_text(path):
    long = [(number, kind, words) for number, kind, words in _blocks(path)
            if words > (CELL_WORDS if kind == "cell" else ITEM_WORDS)]
    assert not long, f"{path}: (line, kind, words) over {CELL_WORDS} words a cell, {ITEM_WORDS} an item: {long}"


SUMMARY = 60  # invoke --list's column for the summary, where it is not a terminal (80 columns)


def test_every_task_lists_a_whole_one_line_summary():
    """invoke --list shows a docstring's first line only, wrapped at the terminal: each is a whole
    sentence that fits, followed by a blank line before the rest."""
    for name, task in ns.tasks.items():
        first, *rest = task.body.__doc__.split("\n")
        assert len(first) <= SUMMARY and first.endswith("."), (name, first)
        assert not rest or not rest[0].strip(), f"{name}: a blank line after the summary: {rest[0]!r}"
    listed = run_invoke("--list", timeout=60)
    rows = [line for line in listed.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == len(ns.tasks), rows  # no summary wrapped onto a second line
    for row in rows:
        name, summary = row.split(None, 1)
        assert summary == ns.tasks[name].body.__doc__.split("\n")[0], row


def test_the_docs_script_installs_only_what_mkdocs_needs():
    """A fresh clone's `bash scripts/docs.sh build` makes .venv with torchbake and its docs extra, not
    the whole set-up (the Docker engine, the test tools) that scripts/setup.sh does."""
    code = [line for line in (ROOT / "scripts" / "docs.sh").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "setup.sh" in line]
    assert [line for line in code if "python3 -m venv .venv" in line]
    assert [line for line in code if "--editable '.[docs]'" in line]


MARKDOWN = ["README.md", *PAGES]


def _outside_code(text: str) -> list[str]:
    """The text's lines, each line of a code fence (its fences too) blanked to "```"."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            lines.append("```")
        else:
            lines.append("```" if fenced else line)
    return lines


def _glued_tables(text: str) -> list[int]:
    """The lines where a table starts right under a line of text (outside code fences)."""
    lines = _outside_code(text)
    return [number for number, (before, line) in enumerate(zip(["", *lines], lines, strict=False), 1)
            if line.startswith("|") and before.strip() and not before.startswith("|")]


@pytest.mark.parametrize("path", MARKDOWN)
def test_every_table_starts_after_a_blank_line(path):
    """A table glued to the paragraph above it is shown as that paragraph's text, pipes and all."""
    glued = _glued_tables((ROOT / path).read_text())
    assert not glued, f"{path}: a table with no blank line before it at lines {glued}"
    assert _glued_tables("text\n| a | b |\n|---|---|\n\n```\nx\n| y |\n```\n| c |\n") == [2, 9]


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))


def _sections(text: str) -> dict[str, str]:
    """Each "## " section of a page by its heading, code fences included in its text."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_speed_page_holds_current_figures_not_a_history_of_runs():
    """Each section's figures come from one measurement, dated; the runs that led there are in
    the repository's history, not on the page."""
    text = (ROOT / "docs" / "speed.md").read_text()
    assert len(text.splitlines()) < 250
    for heading, body in _sections(text).items():
        dates = set(DATE.findall(body))
        assert len(dates) <= 1, f"speed.md, {heading!r}: figures of several days {sorted(dates)}"
        if "\n|" in body:
            assert dates, f"speed.md, {heading!r}: a table that names no date of its run"
    commits = re.findall(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b", text)
    assert not commits, f"speed.md names commits of past runs: {commits[:5]}"
    assert not re.search(r"→|\bbefore these changes\b|\bthe run before\b|\bruns? \d+\b", text)


def test_the_speed_page_names_every_benchmark():
    text = (ROOT / "docs" / "speed.md").read_text()
    assert not [name for name in BENCHMARKS if f"benchmarks/{name}" not in text]


ENGINE_INTERNALS = ("goroutine", "GOMEMLIMIT", "GOGC", "moby_history", "history.db", "docker.pid", "LinkFrom")


def test_the_nightly_page_is_what_a_team_sets_up_and_the_engine_internals_are_troubleshooting():
    nightly = (ROOT / "docs" / "nightly.md").read_text()
    troubleshooting = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert not [word for word in ENGINE_INTERNALS if word in nightly], "nightly.md tells the engine's internals"
    assert not [word for word in ENGINE_INTERNALS if word not in troubleshooting]


def test_the_readme_does_not_repeat_the_getting_started_page():
    """The README says what torchbake is, its two fresh-machine commands, and where the docs are;
    docs/index.md is the getting-started page. No three lines in a row of one are in the other."""
    readme = (ROOT / "README.md").read_text()
    assert "\nbash scripts/main-job.sh\n" in readme and "\nbash scripts/test.sh\n" in readme
    index = [line.strip() for line in (ROOT / "docs" / "index.md").read_text().splitlines() if line.strip()]
    lines = [line.strip() for line in readme.splitlines() if line.strip()]
    runs = {tuple(index[i:i + 3]) for i in range(len(index) - 2)}
    repeated = [lines[i:i + 3] for i in range(len(lines) - 2) if tuple(lines[i:i + 3]) in runs]
    assert not repeated, f"README.md repeats docs/index.md: {repeated[:3]}"
