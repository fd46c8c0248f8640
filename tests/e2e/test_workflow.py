"""The nightly workflow as a team runs it: .github/workflows/nightly.yml read, and each job's
`run:` steps run in order, as written, with bash as GitHub runs them, in a fresh clone of this
working tree, with the environment GitHub gives a job (its documented variables, $GITHUB_ENV,
$GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY, $RUNNER_TEMP, a passwordless sudo), the repository's
variables and secrets given or not, and each `${{ }}` expression evaluated as GitHub does for the
forms the workflow uses. What cannot run here is said, not faked: the `uses:` steps (the clone is
the checkout; one virtual environment of this machine's Python 3.11 is setup-python's, torchbake's
dependencies already in it (python_311); the caches start cold; the artifacts' paths are checked
to exist), `runs-on`, and GitHub's OIDC identity (keyless signing: tests/unit/test_signing.py
against GitHub's recorded token exchange). A job's `pip install` step that an earlier job already
ran into that one environment is said, not run again: on GitHub each job installs into its own
runner's Python; here the environment holds it already, and pip would only build the same
editable wheel again (4 s of CPU a step).

Twice: with no variable and no secret (the matrix builds what it can, skips what needs vendor
URLs, pushes nothing); then with a local registry and a signing key (what it builds is pushed,
and `invoke verify --signatures` holds it to the key)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_invoke

from .helpers import STAND_IN_PYTHON

WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"


def fresh_clone(target: Path) -> Path:
    """A clone of this repository with the working tree's changes (tracked and new files) on it:
    what a team's repository holds."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True)
    diff = subprocess.run(["git", "-C", str(ROOT), "diff", "HEAD", "--binary"], check=True, capture_output=True).stdout
    if diff:
        subprocess.run(["git", "-C", str(target), "apply", "--whitespace=nowarn"], input=diff, check=True)
    new = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--others", "--exclude-standard", "-z"], check=True,
                         capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, new):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    return target


class Expressions:
    """GitHub's `${{ }}` expressions, for the forms the workflow uses: context paths (vars.X,
    secrets.X, matrix.x, strategy.job-index, steps.ID.outputs.X, needs.JOB.outputs.X, env.X,
    github.workspace), 'strings', numbers, ||, &&, ==, !=, >, always() and fromJson(). A missing
    value is '' (GitHub's null reads as ''); a string of digits compares as a number."""

    _PATH = re.compile(r"\b(vars|secrets|matrix|strategy|steps|needs|env|github)((?:\.[A-Za-z0-9_-]+)+)")

    def __init__(self, context: dict):
        self.context = context

    def value(self, path: str):
        found = self.context
        for part in path.split("."):
            found = found.get(part, "") if isinstance(found, dict) else ""
        return int(found) if isinstance(found, str) and found.isdigit() else found

    def evaluate(self, expression: str):
        strings: list[str] = []

        def keep(match: re.Match) -> str:
            strings.append(match.group(1))
            return f"__s{len(strings) - 1}__"

        code = re.sub(r"'([^']*)'", keep, expression.strip())
        unknown = set(re.findall(r"[A-Za-z_][\w-]*\(", code)) - {"always(", "fromJson("}
        assert not unknown, f"an expression this test does not evaluate: {expression}"
        code = self._PATH.sub(lambda m: f"_v({(m.group(1) + m.group(2))!r})", code)
        code = code.replace("&&", " and ").replace("||", " or ").replace("always()", "True").replace("fromJson(", "_j(")
        code = re.sub(r"__s(\d+)__", lambda m: repr(strings[int(m.group(1))]), code)
        return eval(code, {"__builtins__": {}}, {"_v": self.value, "_j": json.loads})  # noqa: S307 (the workflow's own text)

    def text(self, value: str) -> str:
        """``value`` with each ${{ }} replaced by its value."""
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(self.evaluate(m.group(1))), str(value))


class Runner:
    """One run of the workflow on this machine: each job in `needs` order, each instance of its
    matrix, its steps in order."""

    def __init__(self, folder: Path, workspace: Path, python_bin: Path, *, variables: dict, secrets: dict,
                 installed: set[str]):
        self.folder, self.workspace, self.variables, self.secrets = folder, workspace, variables, secrets
        self.installed = installed  # the `pip install` steps already run into setup-python's one environment
        self.workflow = yaml.safe_load(WORKFLOW.read_text())
        self.outputs: dict[str, dict] = {}
        self.results: dict[str, list[dict]] = {}
        tools = folder / "runner-tools"
        tools.mkdir(parents=True, exist_ok=True)
        (tools / "sudo").write_text('#!/bin/sh\nexec "$@"\n')  # GitHub's runners: passwordless sudo (root here)
        (tools / "sudo").chmod(0o755)
        self.path = f"{python_bin}:{tools}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        self.home = folder / "home"
        self.home.mkdir(exist_ok=True)

    def run(self) -> None:
        for name, job in self.workflow["jobs"].items():
            needs = {need: {"outputs": self.outputs.get(need, {})} for need in _list(job.get("needs"))}
            base = Expressions({"vars": self.variables, "needs": needs, "github": {"workspace": str(self.workspace)}})
            if "if" in job and not base.evaluate(job["if"]):
                self.results[name] = []
                continue
            matrix = job.get("strategy", {}).get("matrix")
            instances = base.evaluate(matrix[3:-2]) if isinstance(matrix, str) else {"include": [{}]}
            self.results[name] = [self.run_job(name, job, needs, entry, index)
                                  for index, entry in enumerate(instances["include"])]

    def run_job(self, name: str, job: dict, needs: dict, entry: dict, index: int) -> dict:
        temp = self.folder / f"{name}-{index}"
        temp.mkdir()
        files = {k: temp / v for k, v in (("GITHUB_ENV", "env"), ("GITHUB_OUTPUT", "output"),
                                          ("GITHUB_STEP_SUMMARY", "summary"))}
        for path in files.values():
            path.write_text("")
        runner_temp = temp / "runner-temp"
        runner_temp.mkdir()
        github = {"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_WORKSPACE": str(self.workspace),
                  "GITHUB_REPOSITORY": "team/images", "GITHUB_RUN_ID": "777", "GITHUB_SERVER_URL": "https://github.com",
                  "GITHUB_WORKFLOW_REF": "team/images/.github/workflows/nightly.yml@refs/heads/main",
                  "GITHUB_JOB": name, "RUNNER_TEMP": str(runner_temp), "RUNNER_OS": "Linux", "HOME": str(self.home),
                  "PATH": self.path, "LANG": "C.UTF-8", "PIP_CACHE_DIR": str(Path.home() / ".cache" / "pip"),
                  **({"DOCKER_HOST": os.environ["DOCKER_HOST"]} if os.environ.get("DOCKER_HOST") else {}),
                  **{k: str(v) for k, v in files.items()}}
        context = {"vars": self.variables, "secrets": self.secrets, "matrix": entry, "needs": needs,
                   "strategy": {"job-index": index}, "github": {"workspace": str(self.workspace)}, "steps": {}, "env": {}}
        expressions = Expressions(context)
        env = {k: expressions.text(v) for k, v in {**self.workflow.get("env", {}), **job.get("env", {})}.items()}
        steps = []
        for step in job["steps"]:
            context["env"] = {**env, **_env_file(files["GITHUB_ENV"])}
            if "if" in step and not expressions.evaluate(step["if"]):
                steps.append({"step": step.get("name", step.get("run", step.get("uses"))), "skipped": True})
                continue
            if "uses" in step:  # said, not run: see the module's docstring
                steps.append({"uses": step["uses"], "with": step.get("with", {})})
                continue
            pip_install = step["run"].startswith("python -m pip install ")
            if pip_install and step["run"] in self.installed:
                steps.append({"run": step["run"], "skipped": "installed by an earlier job into this environment"})
                continue
            step_env = {k: expressions.text(v) for k, v in step.get("env", {}).items()}
            script = temp / f"step-{len(steps)}.sh"
            script.write_text(step["run"])
            files["GITHUB_OUTPUT"].write_text("")
            result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                                    cwd=self.workspace, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                    env={k: v for k, v in {**github, **context["env"], **step_env}.items() if v is not None},
                                    timeout=1500)
            steps.append({"run": step["run"], "rc": result.returncode, "out": result.stdout + result.stderr})
            assert result.returncode == 0, f"job {name}[{index}], step {step.get('name', step['run'])!r}:\n" + \
                (result.stdout + result.stderr)[-6000:]
            if pip_install:
                self.installed.add(step["run"])
            if "id" in step:
                context["steps"][step["id"]] = {"outputs": _env_file(files["GITHUB_OUTPUT"])}
        if "outputs" in job:
            self.outputs[name] = {k: expressions.text(v) for k, v in job["outputs"].items()}
        return {"entry": entry, "steps": steps, "summary": files["GITHUB_STEP_SUMMARY"].read_text(),
                "output": "\n".join(s.get("out", "") for s in steps)}


def _list(value) -> list:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="module")
def python_311(tmp_path_factory) -> Path:
    """setup-python's Python 3.11: a fresh virtual environment of this machine's, pip in it, and
    torchbake's dependencies (its [keyless] extra's too), put there by uv (the pinned one of the
    test tools) from the indexes pip is configured with, as scripts/setup.sh fills .venv. The
    workflow's `pip install` steps still run as written: pip finds the dependencies there and
    installs torchbake itself (10 s of CPU for `pip install -e .` where it took 26 s, 2026-12-03).
    pip installing the whole dependency set into a new environment: tests/e2e/test_installed.py."""
    import tomllib

    from torchbake.inputs import pip_configuration

    folder = tmp_path_factory.mktemp("setup-python") / "venv"
    subprocess.run([sys.executable if sys.version_info[:2] == (3, 11) else "python3.11", "-m", "venv", str(folder)],
                   check=True)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["keyless"]]
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=True, capture_output=True,
                             text=True).stdout
    uv_env = pip_configuration.uv_environment(pip_configuration.parse(listing, "install"))
    subprocess.run([Path(sys.executable).with_name("uv"), "pip", "install", "--quiet", "--python", folder / "bin" / "python",
                    *requirements], check=True, env={**os.environ, **uv_env}, stdin=subprocess.DEVNULL)
    return folder / "bin"


def test_the_nightly_workflow_runs_as_written_with_no_secret_then_pushes_and_signs_with_a_registry_and_a_key(
        python_311, tmp_path, tiny_profile, base_image, run_id, registry, tb_env):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    workspace = fresh_clone(tmp_path / "images")
    matrix = tmp_path / "nightly.toml"  # the team's matrix: a release cell it can build, and one that needs vendor URLs
    vendor = tmp_path / "vendor.toml"
    vendor.write_text(STAND_IN_PYTHON + '[build]\nvariant = "release"\n[wheels]\nextension_module = "vendor_ext"\n')
    matrix.write_text(
        f'[matrix]\nprofiles = ["{tiny_profile}", "{vendor}"]\npythons = ["3.11"]\nvariants = ["release"]\n'
        f'name = "{{registry}}torchbake-test/workflow-{{profile}}"\ntag = "{{variant}}-py{{py}}-{run_id}"\n'
        f'[matrix.options.release]\n"image.base" = "{base_image}"\n')
    variables = {"NIGHTLY_CONFIG": str(matrix)}

    installed: set[str] = set()
    bare = Runner(tmp_path / "bare", workspace, python_311, variables=variables, secrets={}, installed=installed)
    bare.run()
    jobs = bare.results["build"]
    assert bare.results["join"] == []  # one platform: no join
    output = "\n".join(job["output"] for job in jobs)
    assert "Skipped vendor-release-py311: needs wheels.extension" in output
    assert "ci-login" not in output and "docker login" not in output  # no registry: neither login nor signing ran
    reports = [json.loads(p.read_text()) for p in workspace.glob("report-*.json")]
    cells = {c["id"]: c for report in reports for c in report["cells"]}
    assert cells["tiny-release-py311"]["status"] in ("built", "unchanged", "retagged") and not cells["tiny-release-py311"]["digest"]
    assert cells["vendor-release-py311"]["status"] == "skipped"
    summaries = "".join(job["summary"] for job in jobs)
    assert "| tiny-release-py311 |" in summaries and "### Skipped" in summaries
    assert list(workspace.glob("junit-*.xml")) and any((workspace / "logs").iterdir())  # what the artifact uploads

    private = ec.generate_private_key(ec.SECP256R1())
    key = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = tmp_path / "sign.pub"
    public.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    published = Runner(tmp_path / "published", workspace, python_311,
                       variables={**variables, "NIGHTLY_REGISTRY": f"{registry}/nightly"}, secrets={"SIGN_KEY": key},
                       installed=installed)
    published.run()
    output = "\n".join(job["output"] for job in published.results["build"])
    assert f"pushing to {registry} without a login" in output
    assert "what is pushed is signed with the key of the secret SIGN_KEY" in output
    assert "BEGIN PRIVATE KEY" not in output and key.splitlines()[1] not in output
    image = f"{registry}/nightly/torchbake-test/workflow-tiny:release-py311-{run_id}"
    verified = run_invoke("verify", "--image", image, "--signatures", "--key", str(public), env=tb_env)
    assert verified.returncode == 0, (verified.stdout + verified.stderr)[-4000:]
    assert not list(workspace.rglob("torchbake-sign.key"))  # the key stayed in $RUNNER_TEMP, out of the artifact
