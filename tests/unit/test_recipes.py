"""The recipes of docs/development.md ("## Recipes"), each carried out as written in a copy of the
project: every code block put where its step says, the files changed compared with the recipe's
`Files:`, and the result shown working (the flags, the option and its variable, the generated
reference, the project's own rules for declarations, the checks every benchmark passes). A variant
and a family are the made-up ones of test_variants.py and test_accelerators.py: the files those
make are the recipe's. Every path a recipe names exists."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tests.conftest
from tests.conftest import ROOT, run_invoke

PAGE = ROOT / "docs" / "development.md"
SPAN = re.compile(r"(`+)(.+?)\1", re.S)  # a Markdown code span, `x` or `` x `with` backticks ``
FENCE = re.compile(r"^(?P<indent> *)```(?P<language>\w*)\s*$")
PROJECT = ("torchbake", "configs", "docker", "tasks.py")  # what the made-up tests copy


def _code(span: str) -> str:
    """A code span's text: one space either side stripped where both are there (CommonMark)."""
    return span[1:-1] if len(span) > 2 and span[0] == span[-1] == " " else span


def _spans(text: str) -> list[str]:
    return [_code(found.group(2)) for found in SPAN.finditer(text)]


@dataclasses.dataclass
class Block:
    """A code block of a recipe, and where its step puts it."""

    language: str
    text: str
    file: str = ""
    where: str = ""  # "before" or "after" the anchor line, "new" (the whole file) or "end"
    anchor: str = ""


def _placement(paragraph: str) -> dict[str, str]:
    """Where the paragraph before a code block puts it: "In `FILE`, … after (before) the line that
    starts `ANCHOR`", "A new file `FILE`", or "At the end of `FILE`"."""
    span = r"(`+)(?P<{0}>.+?)\{1}"
    if found := re.search("In " + span.format("file", 1) + r",.*?\b(?P<where>before|after) the line that starts "
                          + span.format("anchor", 4), paragraph, re.S):
        return {"file": _code(found["file"]), "where": found["where"], "anchor": _code(found["anchor"])}
    if found := re.search("A new file " + span.format("file", 1), paragraph):
        return {"file": _code(found["file"]), "where": "new"}
    if found := re.search("At the end of " + span.format("file", 1), paragraph):
        return {"file": _code(found["file"]), "where": "end"}
    return {}


@dataclasses.dataclass
class Recipe:
    title: str
    text: str  # the subsection, code blocks and all
    files: list[str]  # what its `Files:` name, in order
    blocks: list[Block]

    def named(self, name: str) -> Recipe:
        """The recipe with NAME (the new variant, family or benchmark) as ``name``."""
        return Recipe(self.title, self.text.replace("NAME", name), [f.replace("NAME", name) for f in self.files],
                      [dataclasses.replace(b, text=b.text.replace("NAME", name), file=b.file.replace("NAME", name))
                       for b in self.blocks])


def _recipe(title: str, text: str) -> Recipe:
    files: list[str] = []
    for found in re.finditer(r"Files: (.*?)(?:\n\s*\n|\Z)", text, re.S):
        files += _spans(found.group(1))
    blocks, paragraph, lines = [], [], text.splitlines()
    at = 0
    while at < len(lines):
        fence = FENCE.match(lines[at])
        if not fence:
            if lines[at].strip():  # the paragraph before a block: from a blank line or a list item's start
                starts = not lines[at - 1].strip() or re.match(r" *(\d+\.|[-*]) ", lines[at])
                paragraph = [lines[at]] if starts else [*paragraph, lines[at]]
            at += 1
            continue
        indent, body = len(fence["indent"]), []
        at += 1
        while not lines[at].strip().startswith("```"):
            body.append(lines[at][indent:])
            at += 1
        at += 1
        place = _placement(" ".join(line.strip() for line in paragraph))
        blocks.append(Block(fence["language"], "\n".join(body) + "\n", **place))
        paragraph = []
    return Recipe(title, text, files, blocks)


def recipes() -> dict[str, Recipe]:
    """The recipes of docs/development.md by title."""
    text = PAGE.read_text()
    section = text[text.index("\n## Recipes\n"):]
    section = section[:section.index("\n## ", 1)]
    parts = re.split(r"^### (.+)$", section, flags=re.M)
    return {title: _recipe(title, body) for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def apply(recipe: Recipe, root: Path) -> set[str]:
    """Each code block of ``recipe`` that a step places, put there in the copy at ``root``; the
    files it touched. A Python or Markdown block no step places is a step left out."""
    touched = set()
    for block in recipe.blocks:
        if block.language not in ("python", "markdown"):
            continue  # commands to see the result: the tests below run them
        assert block.file, f"{recipe.title}: a {block.language} block whose step says not where it goes:\n{block.text}"
        path = root / block.file
        if block.where == "new":
            assert not path.exists(), f"{recipe.title}: {block.file} is there already"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)
        elif block.where == "end":
            path.write_text(path.read_text().rstrip("\n") + "\n\n" + block.text)
        else:
            lines = path.read_text().splitlines(keepends=True)
            found = [i for i, line in enumerate(lines) if line.lstrip().startswith(block.anchor)]
            assert len(found) == 1, f"{recipe.title}: {len(found)} lines of {block.file} start {block.anchor!r}"
            at = found[0] + (block.where == "after")
            path.write_text("".join([*lines[:at], block.text, *lines[at:]]))
        touched.add(block.file)
    return touched


def copy_project(root: Path, *paths: str) -> Path:
    """The working tree's files under ``paths`` (tracked, or new and not ignored) copied to ``root``."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *paths], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    for name in filter(None, dict.fromkeys(listed)):
        if (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    return root


def changed(root: Path) -> set[str]:
    """The project's files in the copy at ``root`` that are new or differ from this checkout's."""
    found = set()
    for path in root.rglob("*"):
        name = path.relative_to(root).as_posix()
        if (path.is_file() and "__pycache__" not in path.parts and name.split("/")[0] in PROJECT
                and (not (ROOT / name).is_file() or (ROOT / name).read_bytes() != path.read_bytes())):
            found.add(name)
    return found


# Run in the copy (its torchbake and tasks.py first on the path, the tests of this checkout after):
# the generated reference, and the project's own tests of declarations, for the option KEY.
RULES = '''
import json, os, subprocess, sys, tempfile
from pathlib import Path
from tests.unit import test_bad_values_sweep as sweep, test_config, test_options
from torchbake import reference
from torchbake.core.errors import ConfigurationError
from torchbake.planning import config
key, variable, bad, flags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
test_config.test_every_option_declares_its_help_and_every_section_says_what_it_is_for()
for table in sorted(test_options.TABLES):
    test_options.test_every_flag_sets_an_option_that_exists_and_a_switch_says_what_it_sets(table)
test_options.test_each_task_takes_exactly_the_flags_of_its_table()
test_options.test_every_flag_an_option_declares_is_taken_by_some_task_with_the_declared_help()
swept = [(k, b) for k, b in sweep.OPTIONS if k == key]
for k, b in swept:
    sweep.test_every_option_refuses_a_value_of_the_wrong_kind_naming_the_key(k, b, Path(tempfile.mkdtemp()))
for v, b, k in sweep.ENVIRONMENT:
    if k == key:
        sweep.test_every_options_environment_variable_refuses_a_value_of_the_wrong_kind(v, b, k)
cases = [case for case in sweep.FLAGS if case[1] in flags]  # the new flags, swept by the sweep's own driver
home = Path(tempfile.mkdtemp())
env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ["PYTHONPATH"], "HOME": str(home), "TMPDIR": tempfile.gettempdir(),
       "TORCHBAKE_PATHS_CACHE_DIR": str(home / "cache"), "TORCHBAKE_PATHS_LOG_DIR": str(home / "logs")}
done = subprocess.run([sys.executable, "-c", sweep.DRIVER], capture_output=True, text=True, env=env, cwd=home, check=True,
                      input=json.dumps([[task, flag, value, *sweep.SAFE[task]] for task, flag, value in cases]))
results = {(task, flag): tuple(result) for (task, flag, _), result in zip(cases, json.loads(done.stdout), strict=True)}
for case in cases:
    sweep.test_every_flag_refuses_a_value_of_the_wrong_kind_with_exit_2_naming_it(*case, results)
try:
    config.resolve([], {variable: bad})
    refused = ""
except ConfigurationError as exc:
    refused = f"{exc.exit_code} {exc}"
print(json.dumps({"options": reference.options_markdown(), "tasks": reference.tasks_markdown(), "swept": len(swept),
                  "flags swept": [flag for _, flag, _ in cases],
                  "toml": config.to_toml(config.resolve([], {}).values, documented=True), "refused": refused}))
'''


def rules(root: Path, key: str, variable: str, bad: str, *flags: str) -> dict:
    temp = root.parent / f"{root.name}-temp"  # its folders and its driver's beside the test's (the shared /tmp kept ten a run)
    temp.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-c", RULES, key, variable, bad, *flags], cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{root}:{ROOT}", "TMPDIR": str(temp)}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def entry(markdown: str, heading: str) -> str:
    """The part of a reference page under ``heading`` (up to the next heading of its level)."""
    level = heading.split(" ", 1)[0]
    return markdown[markdown.index(heading + "\n"):].split(f"\n{level} ", 1)[0]


def test_the_recipes_are_the_ones_a_maintainer_looks_for():
    assert list(recipes()) == ["Add an option", "Add a flag", "Add a build variant", "Add an accelerator family",
                               "Add a benchmark"]
    for recipe in recipes().values():
        assert recipe.files, f"{recipe.title}: no Files: line"


def test_every_path_a_recipe_names_is_there():
    """Files and folders, tests as `path::function`: the recipes name what the checkout has (NAME
    stands for the new variant, family or benchmark)."""
    missing = []
    for recipe in recipes().values():
        for span in _spans(re.sub(r"^ *```.*?^ *```", "", recipe.text, flags=re.S | re.M)):
            path, _, function = span.partition("::")
            if "NAME" in path or not re.fullmatch(r"[\w.-]+(/[\w.-]*)+", path):
                continue
            if not (ROOT / path).exists() or (function and f"def {function}(" not in (ROOT / path).read_text()):
                missing.append(f"{recipe.title}: {span}")
    assert not missing, missing


def test_add_an_option(tmp_path):
    """The option as declared: show-config lists it with its source, its environment variable sets
    it and a value its check refuses is exit 2, the TOML and the options reference hold it, and
    the project's rules and sweep of wrong values hold for it."""
    recipe = recipes()["Add an option"]
    root = copy_project(tmp_path, *PROJECT)
    assert apply(recipe, root) == set(recipe.files)
    shown = run_invoke("show-config", cwd=root, root=root,
                       env={"PYTHONPATH": str(root), "TORCHBAKE_BUILD_PROGRESS": "plain", "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stdout + shown.stderr
    row = [cell.strip() for line in shown.stdout.splitlines() if " build.progress " in line for cell in line.split("│")]
    assert row[1:4] == ["build.progress", '"plain"', "environment TORCHBAKE_BUILD_PROGRESS"], shown.stdout

    found = rules(root, "build.progress", "TORCHBAKE_BUILD_PROGRESS", "fancy")
    assert found["refused"] == ("2 build.progress = 'fancy' (from environment TORCHBAKE_BUILD_PROGRESS) is invalid:"
                                " expected one of: auto, plain, tty.")
    assert found["swept"] == 4
    assert '# How a build shows its progress: auto, plain or tty\nprogress = "auto"\n' in found["toml"]
    option = entry(found["options"], "### `build.progress`")
    assert "- type: `str`, default: `\"auto\"`" in option and "- environment: `TORCHBAKE_BUILD_PROGRESS`" in option, option
    assert "- flag:" not in option


def test_add_a_flag(tmp_path):
    """The option's flag and the flag of no option: both in `invoke --help build` and the tasks
    reference; the first sets the option (the command line's value, checked: exit 2), the second
    reaches the task's body; the project's rules for flags hold."""
    recipe = recipes()["Add a flag"]
    root = copy_project(tmp_path, *PROJECT)
    assert apply(recipe, root) == set(recipe.files)
    env = {"PYTHONPATH": str(root)}

    helped = run_invoke("--help", "build", cwd=root, root=root, env=env)
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert "--progress" in helped.stdout and "--note" in helped.stdout, helped.stdout

    def build(*flags: str) -> subprocess.CompletedProcess[str]:
        return run_invoke("build", "--release", "--dry-run", "--docker", "/usr/bin/docker", *flags, cwd=root, root=root,
                          env=env)

    refused = build("--progress", "fancy")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert ("build.progress = 'fancy' (from command line) is invalid: expected one of: auto, plain, tty"
            in " ".join(refused.stderr.split())), refused.stderr
    planned = build("--progress", "plain", "--note", "for the audit")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "for the audit" in planned.stdout.split("Plan for")[0], planned.stdout

    found = rules(root, "build.progress", "TORCHBAKE_BUILD_PROGRESS", "tty", "--progress", "--note")
    assert not found["refused"] and sorted(found["flags swept"]) == ["--note", "--progress"], found["flags swept"]
    build_task = entry(found["tasks"], "## `invoke build`")
    assert "`--progress`" in build_task and "`--note`" in build_task, build_task
    assert "- flag: `--progress`" in entry(found["options"], "### `build.progress`")


class _Stop(Exception):
    """Raised at the made-up test's first command: its files are made by then."""


def made_up(test, root: Path, monkeypatch) -> set[str]:
    """The project files the made-up test ``test`` adds or changes in its copy at ``root``: run up
    to its first `invoke` (what that shows is its own business, in its own module)."""
    def stop(*args, **kwargs):
        raise _Stop

    monkeypatch.setattr(tests.conftest, "run_invoke", stop)
    if hasattr(module := sys.modules[test.__module__], "run_invoke"):  # imported at its top (else where it runs)
        monkeypatch.setattr(module, "run_invoke", stop)
    with contextlib.suppress(_Stop):
        test(root)
    return changed(root)


def layout_lacks(root: Path, monkeypatch) -> str:
    """What test_docs.py's rule that the Layout table names every module says of the copy at
    ``root`` ("": nothing, it holds)."""
    from tests.unit import test_docs

    monkeypatch.setattr(test_docs, "ROOT", root)
    try:
        test_docs.test_the_layout_names_every_module()
    except AssertionError as exc:
        return str(exc)
    return ""


def test_add_a_build_variant(tmp_path, monkeypatch):
    """The files the made-up notebook variant adds are the recipe's, and its Layout row keeps the
    page naming every module."""
    from tests.unit import test_variants

    recipe = recipes()["Add a build variant"].named("notebook")
    made = made_up(test_variants.test_a_new_variant_is_its_module_its_dockerfile_and_its_naming_tag, tmp_path,
                   monkeypatch)
    assert made == {"torchbake/variants/notebook.py", "docker/ubuntu/dockerfile.notebook",
                    "torchbake/configuration/settings.py"}  # the example made its files
    copy_project(tmp_path, "docs/development.md")
    assert "'torchbake/variants/notebook.py'" in layout_lacks(tmp_path, monkeypatch)
    assert made | apply(recipe, tmp_path) == set(recipe.files)
    assert "notebook" not in layout_lacks(tmp_path, monkeypatch)


def test_add_an_accelerator_family(tmp_path, monkeypatch):
    """The file the made-up demo family adds is the recipe's, and its Layout row keeps the page
    naming every module."""
    from tests.unit import test_accelerators

    recipe = recipes()["Add an accelerator family"].named("demo")
    made = made_up(test_accelerators.test_a_gpu_like_family_is_one_new_module, tmp_path, monkeypatch)
    assert made == {"torchbake/families/demo.py"}
    copy_project(tmp_path, "docs/development.md")
    assert "'torchbake/families/demo.py'" in layout_lacks(tmp_path, monkeypatch)
    assert made | apply(recipe, tmp_path) == set(recipe.files)
    assert "demo.py" not in layout_lacks(tmp_path, monkeypatch)


def test_add_a_benchmark(tmp_path):
    """The skeleton, named, is a benchmark the checks of benchmarks pick up and pass (it starts
    with --help, reads no engine file: tests/e2e/test_benchmarks.py in the copy; ruff), its
    --smoke runs a round of its cases, and the speed page names it."""
    recipe = recipes()["Add a benchmark"].named("recipe_demo")
    root = copy_project(tmp_path, *PROJECT, "benchmarks", "tests", "pyproject.toml", "docs/speed.md")
    assert apply(recipe, root) == set(recipe.files)
    script = root / "benchmarks" / "recipe_demo.py"

    checked = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-k",
                              "recipe_demo and not smoke", "tests/e2e/test_benchmarks.py"],  # a smoke run: below
                             cwd=root, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert checked.returncode == 0 and re.search(r"^[1-9]\d* passed", checked.stdout, re.M), checked.stdout + checked.stderr
    linted = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", str(script)], cwd=root,
                            capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr

    with (root / "tasks.py").open("a") as tasks:  # each invoke the benchmark starts: a line of RECIPE_RUNS
        tasks.write('\nimport os\nwith open(os.environ["RECIPE_RUNS"], "a") as runs:\n    runs.write("run\\n")\n')
    ran = subprocess.run([sys.executable, str(script), "--smoke"], cwd=root, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "RECIPE_RUNS": str(tmp_path / "runs")})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert [line.split()[:2] for line in ran.stdout.splitlines()] == [["invoke", "--list"], ["invoke", "show-config"]]
    assert (tmp_path / "runs").read_text() == "run\n" * 2  # --smoke: one round of the two cases

    assert "`benchmarks/recipe_demo.py`" in (root / "docs" / "speed.md").read_text()  # the page names every benchmark
