"""invoke build-all on a real engine: a matrix of four images (two release cells over two
configs, and the dev-fixture base + dev cells), incremental re-runs, --keep-going, shards, and
--push to a real local registry with a pull back by digest. The matrix is about torchbake's
machinery, so its cells install the small stand-in torch (tests.e2e.helpers.make_tiny_torch) and
the dev cell compiles the plain C extension; the real wheel's story is test_release/test_layers'."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.conftest import run_invoke
from tests.support import (
    dying_proxy,
    faulty_proxy,
    http_server,
    registry_digest,
    registry_get,
    registry_manifest,
    registry_provenance,
    registry_referrer_blobs,
    registry_requests,
    serve_registry,
)
from torchbake.fleet.summary import text as markdown_text

from .fixture_repos import git
from .helpers import STAND_IN_PYTHON, copy_image, docker, listing, make_wheel, table_header, table_rows

CELLS = ["tiny-release-py311", "lean-release-py311", "fixture-lite-base-py311", "fixture-lite-dev-py311"]


@pytest.fixture(scope="module")
def nightly(tmp_path_factory, run_id, base_image, lite_dev_config, tiny_profile, tiny_torch):
    folder = tmp_path_factory.mktemp("nightly")
    fixture_profile, credentials = lite_dev_config
    lean = folder / "lean.toml"
    lean.write_text(f'[image]\nname = "x/lean"\n{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\nextra = []\n'
                    '[build]\nvariant = "release"\n')

    def write(extra_profiles=(), registry="", extra_excludes=(), tag=f"{{variant}}-py{{py}}-{run_id}"):
        path = folder / "nightly.toml"
        profiles = [str(tiny_profile), str(lean), str(fixture_profile), *extra_profiles]
        excludes = ["tiny-base-*", "tiny-dev-*", "lean-base-*", "lean-dev-*", "fixture-lite-release-*",
                    "broken-base-*", "broken-dev-*", *extra_excludes]
        path.write_text(
            f"[matrix]\nprofiles = {json.dumps(profiles)}\npythons = [\"3.11\"]\n"
            f'variants = ["base", "dev", "release"]\nregistry = "{registry}"\n'
            f'name = "{{registry}}torchbake-test/nightly-{{profile}}"\ntag = "{tag}"\n'
            f"exclude = {json.dumps(excludes)}\n"
            f'[matrix.options.release]\n"image.base" = "{base_image}"\n'
            f'[matrix.options.base]\n"base.sys" = "{base_image}"\n'
            f'[dev]\ngit_credential_file = "{credentials}"\n'
        )
        return path

    yield folder, lean, write
    for ref in listing("images", "--format", "{{.Repository}}:{{.Tag}}").split():
        if "torchbake-test/nightly-" in ref and ref.endswith(run_id):
            docker("image", "rm", "--force", ref, check=False)


def statuses(report_path) -> dict[str, str]:
    return {c["id"]: c["status"] for c in json.loads(report_path.read_text())["cells"]}


def test_matrix_builds_then_skips_then_rebuilds_only_what_changed(nightly, tb_env):
    folder, lean, write = nightly
    matrix = write()
    first = run_invoke("build-all", "--config", str(matrix), "--jobs", "2", "--report", str(folder / "r1.json"),
                       "--junit", str(folder / "r1.xml"), env=tb_env)
    output = first.stdout + first.stderr
    assert first.returncode == 0, output[-6000:]
    assert set(statuses(folder / "r1.json")) == set(CELLS)
    assert set(statuses(folder / "r1.json").values()) <= {"built", "unchanged", "retagged"}
    table = output[output.rindex("build-all"):]  # the summary table closes the run
    assert all(cell in table for cell in CELLS)
    # Two cells built side by side: here only whole, timestamped lines (their builds are in their
    # logs), then the table; no line of one cell inside a line of another.
    progress = first.stdout[:first.stdout.rindex("build-all")].splitlines()
    assert progress and all(re.fullmatch(r"\d\d:\d\d:\d\d (started|built|unchanged|retagged) +\S+ .*", line)
                            for line in progress), progress
    for line in progress:  # a cell's own lines went to its log
        if " started " in line:
            text = Path(line.rsplit("(log: ", 1)[1].rstrip(")")).read_text()
            assert "Building " in text or " unchanged: " in text, text[:500]
    suite = ElementTree.parse(folder / "r1.xml").getroot()
    assert suite.get("tests") == "4" and suite.get("failures") == "0"

    started = time.monotonic()
    second = run_invoke("build-all", "--config", str(matrix), "--report", str(folder / "r2.json"), env=tb_env)
    seconds = time.monotonic() - started
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    assert set(statuses(folder / "r2.json").values()) == {"unchanged"}
    assert "docker build" not in second.stdout
    print(f"no-op nightly run: {seconds:.1f} s")

    companion = make_wheel(folder, "torchbake-fixture-companion", "1.0", [], {"fixture_companion/__init__.py": ""})
    lean.write_text(lean.read_text().replace("extra = []", f'extra = ["{companion}"]'))
    third = run_invoke("build-all", "--config", str(matrix), "--report", str(folder / "r3.json"), env=tb_env)
    assert third.returncode == 0, (third.stdout + third.stderr)[-3000:]
    assert statuses(folder / "r3.json") == {"tiny-release-py311": "unchanged", "lean-release-py311": "built",
                                            "fixture-lite-base-py311": "unchanged", "fixture-lite-dev-py311": "unchanged"}
    # the rebuilt cell says what changed against the image its tag held: in the summary, and whole in the report
    lean_cell = next(c for c in json.loads((folder / "r3.json").read_text())["cells"] if c["id"] == "lean-release-py311")
    assert re.fullmatch(r"\+torchbake-fixture-companion 1\.0; [\d.]+ [kM]?B new layers", lean_cell["changed"]), lean_cell
    assert [(c["what"], c["name"], c["new"]) for c in lean_cell["diff"]["changes"] if c["what"] == "python"] == [
        ("python", "torchbake-fixture-companion", "1.0")]
    # ... and in the summary table's "changed" column (its folded lines joined: where a fold falls
    # depends on the other columns' widths)
    summary = third.stdout[third.stdout.rindex("build-all"):]
    column = table_header(summary).index("changed")
    lean_row = next(row for row in table_rows(summary) if row[0] == "lean-release-py311")
    assert lean_row[column].replace(" ", "").startswith("+torchbake-fixture-companion1.0;"), lean_row


@pytest.mark.quick
def test_plan_touches_nothing_and_shards_cover_it_once(nightly, tb_env):
    folder, _lean, write = nightly
    matrix = write()
    seen = []
    for index in ("1/2", "2/2"):
        result = run_invoke("build-all", "--config", str(matrix), "--plan", "--shard", index, env=tb_env)
        assert result.returncode == 0, result.stderr
        seen += [cell for cell in CELLS if cell in result.stdout]
    assert sorted(seen) == sorted(CELLS)
    whole = run_invoke("build-all", "--config", str(matrix), "--plan", env=tb_env)
    # the summary line counts every cell in its state (it named only the cells that needed values)
    counted = re.search(r"Plan: (\d+) cells: (.*)", whole.stdout)
    assert counted and int(counted[1]) == len(CELLS), whole.stdout[-1500:]
    assert sum(int(n) for n in re.findall(r"(\d+) [a-z]", counted[2])) == len(CELLS), counted[0]
    emitted = run_invoke("build-all", "--config", str(matrix), "--emit-matrix", "github", "--shards", "2", env=tb_env)
    data = json.loads(emitted.stdout)
    assert sorted(" ".join(e["cells"] for e in data["include"]).split()) == sorted(CELLS)
    # the compile's group alone in one shard, the two release cells in the other (by count: 2 and 2)
    assert sorted(e["cells"] for e in data["include"]) == ["fixture-lite-base-py311 fixture-lite-dev-py311",
                                                           "tiny-release-py311 lean-release-py311"]
    meant = run_invoke("build-all", "--config", str(matrix), "--emit-matrix", "github", "--shard", "1/2", env=tb_env)
    assert meant.returncode == 2 and "--emit-matrix prints every slice: give how many with --shards N, e.g." \
        " --emit-matrix github --shards 2." in meant.stderr, meant.stderr


def test_a_dev_cells_last_build_in_the_registry_weighs_its_shard(nightly, tb_env, tmp_path, run_id):
    """--emit-matrix reads the provenance of a dev cell's last image in the registry (a real
    registry, the document attached as torchbake attaches it) and weighs the cell by the build
    time it records; a registry that does not answer is said, and the declared minutes decide."""
    from torchbake.adapters import registry
    from torchbake.supply_chain import attestations

    folder, _lean, write = nightly
    repository, tag = "torchbake-test/nightly-fixture-lite", f"dev-py311-{run_id}"
    statement = {"predicate": {"runDetails": {"metadata": {"startedOn": "2026-11-27T01:00:00+00:00",
                                                           "finishedOn": "2026-11-27T11:00:00+00:00"}}}}
    (tmp_path / "empty").mkdir()
    tarball = tmp_path / "tiny.tar"  # an image of one empty layer: what the test weighs is its provenance
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(tmp_path / "empty"), "."], check=True)
    with serve_registry(tmp_path) as host:
        matrix = write(registry=host)
        docker("import", str(tarball), f"{host}/{repository}:{tag}")
        try:
            docker("push", f"{host}/{repository}:{tag}")
        finally:
            docker("image", "rm", f"{host}/{repository}:{tag}")
        attestations.attach(registry.for_host(host, {}), repository, tag, {"provenance": json.dumps(statement)},
                            created="2026-11-27T11:00:00Z")
        emitted = run_invoke("build-all", "--config", str(matrix), "--emit-matrix", "github", "--shards", "2",
                             env=tb_env)
        assert emitted.returncode == 0, emitted.stderr
        minutes = {e["cells"]: e["minutes"] for e in json.loads(emitted.stdout)["include"]}
        assert minutes["fixture-lite-base-py311 fixture-lite-dev-py311"] == 600 + 15  # recorded + base's declared
    down = run_invoke("build-all", "--config", str(matrix), "--emit-matrix", "github", "--shards", "2", env=tb_env)
    assert down.returncode == 0, down.stderr
    assert f"the registry of {host}/{repository}:{tag} did not answer" in down.stderr
    minutes = {e["cells"]: e["minutes"] for e in json.loads(down.stdout)["include"]}
    assert minutes["fixture-lite-base-py311 fixture-lite-dev-py311"] == 90 + 15  # declared


def test_keep_going_builds_the_others_and_reports_the_failure(nightly, tb_env, tiny_torch):
    folder, _lean, write = nightly
    broken = folder / "broken.toml"
    broken.write_text(f'{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\nextra = ["torchbake-no-such-package==1.0"]\n'
                      '[build]\nvariant = "release"\n')
    matrix = write(extra_profiles=[str(broken)])
    result = run_invoke("build-all", "--config", str(matrix), "--keep-going", "--report", str(folder / "r4.json"),
                        "--junit", str(folder / "r4.xml"), env=tb_env)
    assert result.returncode == 1, (result.stdout + result.stderr)[-3000:]
    report = json.loads((folder / "r4.json").read_text())
    by_id = {c["id"]: c for c in report["cells"]}
    assert by_id["broken-release-py311"]["status"] == "failed"
    assert "torchbake-no-such-package" in by_id["broken-release-py311"]["error"] + by_id["broken-release-py311"]["reason"]
    assert all(by_id[c]["status"] in ("unchanged", "built", "retagged") for c in CELLS)
    assert "1 of 5 cells did not build: broken-release-py311" in result.stderr
    assert ElementTree.parse(folder / "r4.xml").getroot().get("failures") == "1"


def test_push_records_digests_that_pull_back(pushed, tb_env, run_id, tmp_path):
    """The matrix pushed (the module's pushed fixture, which the fresh-engine tests below read too):
    each cell's report names the digest the registry holds, with the SBOMs and the provenance beside it."""
    registry, _log, _images, _manifests, cells = pushed
    cell = cells["tiny-release-py311"]
    assert cell["digest"].startswith("sha256:")
    image = f"{registry}/team/torchbake-test/nightly-tiny:release-py311-{run_id}"
    assert cell["image"] == image
    repo = image.rsplit(":", 1)[0]
    try:
        # The SBOMs and the provenance hang beside the image, found through the referrers tag
        # schema (docker-registry 2.8 has no referrers API), read back by a client nobody here
        # wrote; the image's own manifest is the one the push made.
        skopeo = ["skopeo", "--override-os", "linux", "inspect", "--raw", "--tls-verify=false"]
        assert hashlib.sha256(run(*skopeo, f"docker://{image}").encode()).hexdigest() == cell["digest"].split(":")[1]
        index = json.loads(run(*skopeo, f"docker://{repo}:{cell['digest'].replace(':', '-')}"))
        assert sorted(m["artifactType"] for m in index["manifests"]) == [  # SPDX 2.3 and 3 share their type
            "application/spdx+json", "application/spdx+json", "application/vnd.cyclonedx+json",
            "application/vnd.in-toto+json"]
        records = [json.loads(p.read_text()) for p in (Path(tb_env["TORCHBAKE_PATHS_CACHE_DIR"]) / "logs").glob(
            "*.manifest.json")]
        written = next(r["attestations"][image] for r in records if image in r.get("attestations", {}))
        for entry in index["manifests"]:
            artifact = json.loads(run(*skopeo, f"docker://{repo}@{entry['digest']}"))
            assert artifact["subject"]["digest"] == cell["digest"]
            copied = tmp_path / entry["digest"].split(":")[1]
            run("skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{repo}@{entry['digest']}",
                f"dir:{copied}")
            document = (copied / artifact["layers"][0]["digest"].split(":")[1]).read_text()
            kind = entry["annotations"]["dev.torchbake.attestation"]  # spdx, spdx3, cyclonedx, provenance
            assert document == Path(written[kind]).read_text()  # the same documents
        # ... and torchbake reads them back from the registry for an image this engine lacks
        layer_ids = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", image).stdout)
        docker("image", "rm", image)
        read_back = run_invoke("sbom", image, "--format", "cyclonedx", env=tb_env)
        assert read_back.returncode == 0, read_back.stderr
        assert read_back.stdout == Path(written["cyclonedx"]).read_text()
        # a diff of two registry references reads both sides from the registry (SBOM and configuration)
        compared = run_invoke("diff", image, image, "--format", "json", env=tb_env)
        assert compared.returncode == 0, compared.stdout + compared.stderr
        same = json.loads(compared.stdout)
        assert same["summary"] == "no package changed; no new layer" and same["changes"] == []
        assert len(same["layers"]["shared"]) == len(layer_ids) and same["layers"]["new"] == []
        pulled = docker("pull", f"{repo}@{cell['digest']}")
        assert cell["digest"] in pulled.stdout
        # No step without work: two equal (empty) layers in a row made the mode=max cache export
        # take minutes and gigabytes of the engine's memory (docker/buildx#537).
        layers = json.loads(docker("image", "inspect", "--format", "{{json .RootFS.Layers}}",
                                   f"{repo}@{cell['digest']}").stdout)
        assert len(set(layers)) == len(layers), layers
    finally:
        docker("image", "rm", "--force", f"{repo}@{cell['digest']}", check=False)


def run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _flat(text: str) -> str:
    """Text without table borders and line breaks, for finding a wrapped cell in a rendered table."""
    return re.sub(r"[\s│┃┆]+", "", text)


def test_three_kinds_of_failure_are_each_reported_with_their_first_error_line(nightly, tb_env, tmp_path, tiny_torch,
                                                                             registry):
    """A RUN step that fails (the engine's "[/bin/sh -c …]" text must stay plain text), a context
    that cannot be prepared, and an image that fails verification, beside one good cell, with
    --push: the summary, the JSON and the JUnit report list all four, each failure with its first
    error line; the good cell is pushed, the one that failed verification pushes nothing."""
    folder, _lean, write = nightly
    kit = tmp_path / "kit"
    (kit / "bad_kit").mkdir(parents=True)
    (kit / "bad_kit" / "install.sh").write_text("echo '[red]installer[/] [bold failing'\nexit 3\n")
    with tarfile.open(tmp_path / "bad_kit.tar.gz", "w:gz") as tar:
        tar.add(kit / "bad_kit", arcname="bad_kit")
    extension = make_wheel(tmp_path, "torchbake-fixture-vendor", "1.0", [], {"vendor_ext/__init__.py": ""})
    release = f'{STAND_IN_PYTHON}[wheels]\ntorch = "{tiny_torch}"\n[build]\nvariant = "release"\n'
    profiles = {
        "runfail": release + f'[toolkits]\nmusa_toolkits_url = "{tmp_path / "bad_kit.tar.gz"}"\n',
        "prepfail": release.replace('[build]', 'extra = ["torchbake-no-such-package==1.0"]\n[build]'),
        "verifyfail": release.replace('[build]', f'extension = "{extension}"\nextension_module = "not_there"\n[build]'),
    }
    for name, text in profiles.items():
        (folder / f"{name}.toml").write_text(text)
    matrix = write(extra_profiles=[str(folder / f"{name}.toml") for name in profiles], registry=f"{registry}/team",
                   extra_excludes=[f"{name}-{variant}-*" for name in profiles for variant in ("base", "dev")])
    report, junit = tmp_path / "missing" / "sub" / "r.json", tmp_path / "r.xml"  # the parent is made up front
    step_summary = tmp_path / "step-summary.md"
    step_summary.write_text("an earlier step's summary\n")  # GitHub's file: each step appends to it
    with webhook_receiver() as (hook, received):
        result = run_invoke("build-all", "--config", str(matrix), "--only", "tiny-release-*", "--only", "*fail-*",
                            "--keep-going", "--push", "--report", str(report), "--junit", str(junit),
                            "--summary", str(step_summary),
                            env={**tb_env, "TORCHBAKE_NOTIFY_WEBHOOK": hook, "GITHUB_RUN_ID": "4242",
                                 "GITHUB_REPOSITORY": "team/images", "GITHUB_SERVER_URL": "https://github.example"})
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-4000:]
    assert "Traceback" not in output and "MarkupError" not in output
    assert "[red]installer[/] [bold failing" in output  # the installer's own text, as it printed it
    cells = {c["id"]: c for c in json.loads(report.read_text())["cells"]}
    assert sorted(cells) == ["prepfail-release-py311", "runfail-release-py311", "tiny-release-py311",
                             "verifyfail-release-py311"]
    assert cells["tiny-release-py311"]["status"] in ("built", "unchanged", "retagged")
    assert registry_digest(registry, cells["tiny-release-py311"]["image"]) == cells["tiny-release-py311"]["digest"] != ""
    assert registry_digest(registry, cells["verifyfail-release-py311"]["image"]) == ""  # a failed verification pushes nothing
    assert cells["verifyfail-release-py311"]["digest"] == ""
    failures = {c: cells[c]["error"] for c in cells if c != "tiny-release-py311"}
    assert all(cells[c]["status"] == "failed" for c in failures)
    assert "torchbake-no-such-package" in failures["prepfail-release-py311"]
    assert "[/bin/sh -c" in failures["runfail-release-py311"] or "exit code: 3" in failures["runfail-release-py311"]
    assert "not_there" in failures["verifyfail-release-py311"]
    suite = ElementTree.parse(junit).getroot()
    assert suite.get("tests") == "4" and suite.get("failures") == "3"
    messages = {case.get("name"): case.find("failure").get("message")
                for case in suite.iter("testcase") if case.find("failure") is not None}
    assert messages == failures  # the same first error line, exactly, in both reports
    summary = result.stdout[result.stdout.rindex("build-all"):]  # the table, then a line per failed cell
    for cell_id, error in failures.items():
        assert f"failed {cell_id}: {error} (log: " in summary, (cell_id, error)
    assert _flat("tiny-release-py311") in _flat(summary)
    assert "3 of 4 cells did not build" in result.stderr

    # the morning summary: appended after the earlier step's, a row per cell, each failure's first
    # error line as plain text (the installer's "[red]" escaped, not markup) and the command that shows its log
    markdown = step_summary.read_text()
    assert markdown.startswith("an earlier step's summary\n## torchbake build-all\n\n1 built, 3 failed\n") or \
        markdown.startswith("an earlier step's summary\n## torchbake build-all\n\n3 failed, 1 built\n"), markdown[:300]
    rows = {line.split(" | ")[0][2:]: line for line in markdown.splitlines() if line.startswith("| ") and "---" not in line}
    assert set(rows) == {"cell", *(c.replace("_", "\\_") for c in cells)}, rows
    assert " | built | " in rows["tiny-release-py311"] or " | unchanged | " in rows["tiny-release-py311"]
    assert "gh run download 4242 --repo team/images" in markdown
    for cell_id, error in failures.items():
        line = next(line for line in markdown.splitlines() if line.startswith(f"- **{cell_id}** (failed): "))
        assert markdown_text(error) in line, (error, line)  # the first error line, as text
        said = line.split("(failed): ", 1)[1].rsplit("; log: ", 1)[0]
        assert re.search(r"(?<!\\)[\[\]*_<>`|]", said) is None, said  # no markup left unescaped
        assert "log: `less " in line and cells[cell_id]["log"].rsplit("/", 1)[1] in line, line
        assert Path(line.split("log: `less ", 1)[1].rstrip("`")).is_file()  # the command shows the log
    # the failed night told the webhook, Slack's way; its URL (the secret) in no output
    assert "Told the webhook ([notify] webhook) of the 3 failed cell(s)." in result.stdout
    assert len(received) == 1 and received[0]["content-type"] == "application/json"
    text = received[0]["body"]["text"]
    assert text.startswith("torchbake build-all: 3 of 4 cells failed"), text
    assert all(f"• {cell_id} (failed): " in text for cell_id in failures), text
    assert text.endswith("https://github.example/team/images/actions/runs/4242")
    assert hook not in output and hook.rsplit("/", 1)[1] not in output + markdown + report.read_text()


@contextlib.contextmanager
def webhook_receiver():
    """A local webhook (Slack's incoming-webhook shape: a secret token in its path) that keeps what
    it was POSTed: (its URL, [{"content-type", "body"}])."""
    import http.server
    import secrets

    from tests.support import serving

    received, token = [], secrets.token_hex(12)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            ok = self.path == f"/services/T0/B0/{token}"
            if ok:
                received.append({"content-type": self.headers["Content-Type"], "body": json.loads(body)})
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    with serving(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}/services/T0/B0/{token}", received


def layer_of_step(host: str, image: str, manifest: dict, text: str) -> int:
    """The index in ``manifest``'s layers of the layer the first build step whose command holds
    ``text`` made (the image config's history, read from the registry, names each step, without
    its mounts; steps such as ENV or LABEL make no layer)."""
    repository = image.split("/", 1)[1].rsplit(":", 1)[0]
    with urllib.request.urlopen(f"http://{host}/v2/{repository}/blobs/{manifest['config']['digest']}", timeout=30) as answer:
        history = json.load(answer)["history"]
    steps = [entry.get("created_by", "") for entry in history if not entry.get("empty_layer")]
    assert len(steps) == len(manifest["layers"]), (len(steps), len(manifest["layers"]))
    return next(index for index, step in enumerate(steps) if text in step)


@pytest.fixture(scope="module")
def pushed(nightly, tb_env, tmp_path_factory):
    """Engine A's matrix, every cell built (--force) and pushed to a registry of this module's own
    (its access log kept), once for the push and fresh-engine tests: (host, access log, {cell: image},
    {cell: manifest as pushed}, {cell: its entry in the report})."""
    _folder, _lean, write = nightly
    where = tmp_path_factory.mktemp("pushed")
    log = where / "registry-access.log"
    with serve_registry(where, log) as host:
        first = run_invoke("build-all", "--config", str(write(registry=f"{host}/team")), "--force", "--push", "--report",
                           str(where / "a.json"), env=tb_env)
        assert first.returncode == 0, (first.stdout + first.stderr)[-5000:]
        cells = {c["id"]: c for c in json.loads((where / "a.json").read_text())["cells"]}
        images = {cell: c["image"] for cell, c in cells.items()}
        yield host, log, images, {cell: registry_manifest(host, image) for cell, image in images.items()}, cells


def test_a_fresh_engine_remembers_through_the_registry(nightly, pushed, second_engine, tb_env, tmp_path, base_image):
    """Engine A builds the matrix and pushes it (inline build cache, input-hash tags). Engine B,
    empty but for the OS image and without NAT, finds every cell in the registry without pulling
    a layer; after one wheel changed it rebuilds that cell alone, torch's steps from the registry's
    cache, and pushes only the layers above torch."""
    folder, lean, write = nightly
    host, log, images, manifests, _cells = pushed
    on_b = {**tb_env, **second_engine}
    matrix = write(registry=f"{host}/team")
    assert all(image.startswith(f"{host}/team/") for image in images.values()), images
    layers = {layer["digest"] for manifest in manifests.values() for layer in manifest["layers"]}
    lean_image = images["lean-release-py311"]
    old_layers = [layer["digest"] for layer in manifests["lean-release-py311"]["layers"]]
    # the tag names the image's own manifest, the reproducible one: no BuildKit provenance in an
    # index beside it (it carries the build's times, so the tag's digest would differ every
    # build); torchbake's SBOMs and provenance hang off the manifest as referrers
    assert registry_provenance(host, lean_image) is None
    assert registry_referrer_blobs(host, lean_image)

    copy_image(base_image, second_engine)
    mark = log.stat().st_size
    second = run_invoke("build-all", "--config", str(matrix), "--report", str(tmp_path / "b.json"), env=on_b)
    assert second.returncode == 0, (second.stdout + second.stderr)[-5000:]
    assert statuses(tmp_path / "b.json") == dict.fromkeys(CELLS, "unchanged (registry)"), second.stdout[-3000:]
    fetched = [path for method, path, _size in registry_requests(log, mark) if method == "GET" and "/blobs/" in path]
    assert not [path for path in fetched if path.rsplit("/", 1)[1] in layers], fetched
    assert len(docker("images", "-q", env=second_engine).stdout.split()) == 1  # the OS image alone

    # (The same inputs under a new tag are built as that tag, never pointed at an image whose labels
    # name another: test_publishing.test_a_tag_lands_in_the_registry_only_on_an_image_that_names_it.)

    lean_text = lean.read_text()
    wheel = make_wheel(tmp_path, "torchbake-fixture-ext", "2.0", [], {"torchbake_fixture_ext/__init__.py": ""})
    lean.write_text(lean_text.replace("[wheels]\n", f'[wheels]\nextension = "{wheel}"\n'
                                                     'extension_module = "torchbake_fixture_ext"\n'))
    try:
        mark = log.stat().st_size
        third = run_invoke("build-all", "--config", str(matrix), "--push", "--report", str(tmp_path / "c.json"),
                           env=on_b)
    finally:
        lean.write_text(lean_text)
    assert third.returncode == 0, (third.stdout + third.stderr)[-5000:]
    assert statuses(tmp_path / "c.json") == {**dict.fromkeys(CELLS, "unchanged (registry)"),
                                             "lean-release-py311": "built"}
    cell = next(c for c in json.loads((tmp_path / "c.json").read_text())["cells"] if c["status"] == "built")
    build_log = Path(cell["log"]).read_text()
    torch_step = re.search(r"#(\d+) \[[ \w/-]+\] RUN --network=none --mount=type=bind,source=wheelhouse/torch", build_log)
    assert torch_step, build_log[-4000:]
    step = torch_step.group(1)
    # taken from the registry's cache, not run: BuildKit says CACHED, or extracts the cached
    # layer for the steps above it ("extracting sha256:…", DONE); a step that ran prints its
    # own lines ("#N 0.216 Installed …")
    assert not re.search(rf"^#{step} \d+\.\d+ ", build_log, re.M), build_log[-4000:]
    assert re.search(rf"^#{step} (CACHED|DONE)", build_log, re.M), build_log[-4000:]
    new = registry_manifest(host, lean_image)
    new_layers = [layer["digest"] for layer in new["layers"]]
    shared = 0
    while shared < min(len(new_layers), len(old_layers)) and new_layers[shared] == old_layers[shared]:
        shared += 1
    torch_layer = layer_of_step(host, lean_image, new, "COPY /opt/venv/")  # torch's: the first wheels copied in
    assert shared > torch_layer, (shared, torch_layer, old_layers, new_layers)  # torch's layer and all below it: the same blobs
    # the image's own blobs and its provenance's (its build cache goes to <name>-buildcache beside it)
    uploaded = {urllib.parse.unquote(path.split("digest=", 1)[1].split("&", 1)[0])
                for method, path, _size in registry_requests(log, mark)
                if method == "PUT" and "digest=" in path and "-buildcache/" not in path}
    # torchbake's SBOMs and provenance beside the image
    attestation = registry_referrer_blobs(host, lean_image)
    assert uploaded and uploaded <= set(new_layers[shared:]) | {new["config"]["digest"]} | attestation, (
        uploaded, new_layers, shared)


def test_a_push_through_connection_resets_and_a_503_is_retried(nightly, registry, tb_env, run_id, tmp_path):
    """The first connections reset and answered 503: the push is retried (by the engine's own
    retries, or by torchbake's when a failure reaches it: tests/unit/test_registry.py) and lands."""
    _folder, _lean, write = nightly
    faults = ["reset", "503", "reset"]
    with faulty_proxy(registry, faults) as proxy:
        matrix = write(registry=f"{proxy}/team")
        result = run_invoke("build-all", "--config", str(matrix), "--only", "tiny-release-*", "--push", "--no-registry-check",
                            "--report", str(tmp_path / "r.json"), env={**tb_env, "TORCHBAKE_DOWNLOADS_RETRY_BACKOFF": "0.2"})
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert faults == [], faults  # every fault was met on the way
    cell = json.loads((tmp_path / "r.json").read_text())["cells"][0]
    assert cell["digest"].startswith("sha256:")
    image = cell["image"].replace(proxy, registry)
    assert registry_manifest(registry, image)["layers"]


def test_a_push_the_registry_refuses_names_docker_login_and_changes_nothing(nightly, registry, tb_env, tmp_path):
    """Yesterday's lean image is in the registry; tonight's (one more companion) is refused: exit 10,
    `docker login` named, the local image kept, and the registry's tag still on yesterday's image."""
    folder, lean, write = nightly
    env = {**tb_env, "TORCHBAKE_DOWNLOADS_RETRY_BACKOFF": "0.2"}
    yesterday = run_invoke("build-all", "--config", str(write(registry=f"{registry}/team")), "--only", "lean-release-*",
                           "--push", "--report", str(tmp_path / "y.json"), env=env)
    assert yesterday.returncode == 0, (yesterday.stdout + yesterday.stderr)[-3000:]
    pushed = json.loads((tmp_path / "y.json").read_text())["cells"][0]
    assert registry_digest(registry, pushed["image"]) == pushed["digest"]
    lean_text = lean.read_text()
    companion = make_wheel(tmp_path, "torchbake-refused-companion", "1.0", [], {"refused_companion/__init__.py": ""})
    lean.write_text(lean_text.replace("extra = []", f'extra = ["{companion}"]'))
    try:
        with faulty_proxy(registry, ["401"]) as proxy:
            matrix = write(registry=f"{proxy}/team")
            result = run_invoke("build-all", "--config", str(matrix), "--only", "lean-release-*", "--push",
                                "--report", str(tmp_path / "r.json"), env=env)
    finally:
        lean.write_text(lean_text)
    cell = json.loads((tmp_path / "r.json").read_text())["cells"][0]
    assert result.returncode == 10, (result.returncode, (result.stdout + result.stderr)[-3000:])
    assert cell["status"] == "failed" and cell["exit_code"] == 10, cell
    assert f"docker login {proxy}" in result.stdout + result.stderr, (result.stdout + result.stderr)[-3000:]
    assert docker("image", "inspect", cell["image"], check=False).returncode == 0  # the local image stays
    assert registry_digest(registry, pushed["image"]) == pushed["digest"]  # the tag did not move


def test_a_cold_download_cache_decides_as_the_plan_does_unchanged_in_the_registry(nightly, registry, tb_env, tmp_path,
                                                                                  tiny_torch):
    """A cell whose torch comes by URL is pushed; on a machine with an empty download cache and no
    local image, the run downloads the input first and finds the image in the registry (never a
    rebuild), and --plan then says the same."""
    _folder, _lean, write = nightly
    www = tmp_path / "www"
    www.mkdir()
    (www / tiny_torch.name).write_bytes(tiny_torch.read_bytes())
    with http_server(www) as url:
        remote = tmp_path / "remote.toml"
        remote.write_text(f'{STAND_IN_PYTHON}[wheels]\ntorch = "{url}/{tiny_torch.name}"\nextra = []\n'
                          '[build]\nvariant = "release"\n')
        matrix = write(extra_profiles=[str(remote)], registry=f"{registry}/team", extra_excludes=["remote-base-*",
                                                                                               "remote-dev-*"])
        first = run_invoke("build-all", "--config", str(matrix), "--only", "remote-release-*", "--push",
                           "--report", str(tmp_path / "first.json"), env=tb_env)
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        image = json.loads((tmp_path / "first.json").read_text())["cells"][0]["image"]
        docker("image", "rm", "--force", image)
        cold = {**tb_env, "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cold-cache")}
        plan = run_invoke("build-all", "--config", str(matrix), "--only", "remote-release-*", "--plan", env=cold)
        assert plan.returncode == 0 and "decide" in plan.stdout, plan.stdout[-3000:]
        again = run_invoke("build-all", "--config", str(matrix), "--only", "remote-release-*", "--push",
                           "--report", str(tmp_path / "again.json"), env=cold)
        assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
        assert statuses(tmp_path / "again.json") == {"remote-release-py311": "unchanged (registry)"}, again.stdout[-3000:]
        assert "docker build" not in again.stdout
        after = run_invoke("build-all", "--config", str(matrix), "--only", "remote-release-*", "--plan", env=cold)
        assert "unchanged (registry)" in after.stdout, after.stdout[-3000:]


def test_two_matrices_pushing_one_image_at_once_keep_their_own_logs_and_reports(nightly, registry, tb_env, tmp_path):
    """Two `build-all --push --force` of the same cell started together: the second waits for the
    first's build and push (its tag is the first's until then), then builds and pushes its own;
    each report names its own log, and the digest each records is the registry's for the tag."""
    import threading

    _folder, _lean, write = nightly
    matrix = write(registry=f"{registry}/team")
    results = {}

    def run(name: str) -> None:
        results[name] = run_invoke("build-all", "--config", str(matrix), "--only", "tiny-release-*", "--push", "--force",
                                   "--report", str(tmp_path / f"{name}.json"), env=tb_env)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results.values():
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    waited = [name for name, result in results.items() if "another torchbake run is building or pushing" in result.stdout]
    assert len(waited) == 1, {name: r.stdout[-1500:] for name, r in results.items()}
    cells = {name: json.loads((tmp_path / f"{name}.json").read_text())["cells"][0] for name in results}
    assert cells["a"]["log"] != cells["b"]["log"]
    for cell in cells.values():
        assert cell["status"] == "built" and Path(cell["log"]).read_text().count(" buildx build ") == 1, cell
        repository = cell["image"].split("/", 1)[1].rsplit(":", 1)[0]
        with registry_get(registry, repository, f"manifests/{cell['digest']}", method="HEAD") as answer:
            assert answer.headers["Docker-Content-Digest"] == cell["digest"]  # what it pushed, by its digest
        assert f'digest: {cell["digest"]} size' in Path(cell["log"]).read_text()  # its own push's, in its own log
    assert cells[waited[0]]["digest"] == registry_digest(registry, cells[waited[0]]["image"])  # the last push's


def test_a_registry_that_stops_answering_in_the_middle_of_a_push_is_exit_10(nightly, registry, tb_env, tmp_path):
    """The registry answers the plan's questions, then dies as the push uploads its first blob: the
    run ends with the registry's exit code (10, as the README lists), never the engine's (4), and
    the report says so for the cell."""
    _folder, _lean, write = nightly
    env = {**tb_env, "TORCHBAKE_DOWNLOADS_RETRY_BACKOFF": "0.1", "TORCHBAKE_DOWNLOADS_RETRIES": "1"}
    with dying_proxy(registry) as proxy:
        result = run_invoke("build-all", "--config", str(write(registry=f"{proxy}/team")), "--only", "tiny-release-*",
                            "--push", "--force", "--report", str(tmp_path / "r.json"), env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 10, (result.returncode, output[-3000:])
    cell = json.loads((tmp_path / "r.json").read_text())["cells"][0]
    assert cell["status"] == "failed" and cell["exit_code"] == 10, cell
    assert "Pushing" in cell["reason"], cell


def test_a_registry_that_cannot_be_asked_builds_or_with_require_registry_fails(nightly, tb_env, tmp_path):
    """Nothing listens on the registry's port: the plan says the registry could not be asked and
    the cell would build; with --require-registry the cell fails naming the registry (exit 10)
    before anything is built."""
    _folder, _lean, write = nightly
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{probe.getsockname()[1]}"
    matrix = write(registry=f"{host}/team")
    tb_env = {**tb_env, "TORCHBAKE_DOWNLOADS_RETRY_BACKOFF": "0.1"}  # connection refused is retried: briefly
    plan = run_invoke("build-all", "--config", str(matrix), "--only", "tiny-release-*", "--plan", env=tb_env)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    flat = re.sub(r"\s*│\s*|\s+", " ", plan.stdout)
    assert "build" in flat and host in flat, plan.stdout
    required = run_invoke("build-all", "--config", str(matrix), "--only", "tiny-release-*", "--require-registry",
                          "--report", str(tmp_path / "r.json"), env=tb_env)
    output = required.stdout + required.stderr
    assert required.returncode == 10, (required.returncode, output[-3000:])
    cell = json.loads((tmp_path / "r.json").read_text())["cells"][0]
    assert cell["status"] == "failed" and host in cell["reason"], cell
    assert "docker build" not in output


def test_a_fresh_engine_compiles_only_the_extension_whose_tag_moved(nightly, pushed, second_engine, repos, tb_env,
                                                                     tmp_path, base_image):
    """Engine A built and pushed the fixture base + dev cells (every step's cache to the
    registry, mode=max: pushed). The extension's tag moves; engine B, empty but for the OS image, rebuilds
    the dev cell: the PyTorch fixture's compile step comes from the registry's cache (no compiler
    runs in it), the extension's step runs, every layer below the extension's is the same blob,
    and the labels name the new commit. (Last in this module: the tag stays moved.)"""
    folder, _lean, write = nightly
    host, _log, images, manifests, _cells = pushed
    only = ("--only", "fixture-lite-*")
    matrix = write(registry=f"{host}/team")
    dev, old = images["fixture-lite-dev-py311"], manifests["fixture-lite-dev-py311"]

    work = repos["root"] / "work" / "extension-lite"
    (work / "csrc" / "c.c").write_text((work / "csrc" / "c.c").read_text() + "/* moved */\n")
    for args in (("commit", "-q", "-am", "moved"), ("tag", "-f", "dev1.5.1"),
                 ("push", "-q", "--force", "origin", "main", "refs/tags/dev1.5.1")):
        git(*args, cwd=work)
    moved = git("rev-parse", "HEAD", cwd=work)

    copy_image(base_image, second_engine)
    on_b = {**tb_env, **second_engine, "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "cache-b")}
    # the plan knows, from the registry's image alone, what changed and which steps run again
    plan = run_invoke("build-all", "--config", str(matrix), *only, "--plan", env=on_b)
    assert plan.returncode == 0, (plan.stdout + plan.stderr)[-3000:]
    rows = {row[1]: row[3:] for row in table_rows(plan.stdout)}
    assert rows["fixture-lite-base-py311"][0] == "skip", plan.stdout
    action, why = rows["fixture-lite-dev-py311"]
    assert action == "build" and why.startswith("no image has these inputs; "), plan.stdout
    assert why.endswith("changed since the registry's image: build_args.EXTENSION_COMMIT; runs again from the"
                        " extension step on"), plan.stdout
    second = run_invoke("build-all", "--config", str(matrix), *only, "--push", "--report", str(tmp_path / "b.json"),
                        env=on_b)
    assert second.returncode == 0, (second.stdout + second.stderr)[-5000:]
    cells = {c["id"]: c for c in json.loads((tmp_path / "b.json").read_text())["cells"]}
    assert {i: c["status"] for i, c in cells.items()} == {"fixture-lite-base-py311": "unchanged (registry)",
                                                           "fixture-lite-dev-py311": "built"}
    build_log = Path(cells["fixture-lite-dev-py311"]["log"]).read_text()
    steps = dict(re.findall(r"^#(\d+) \[[^\]]+\] RUN .*common/(build_source\.sh pytorch|build_extension\.sh)",
                            build_log, re.M))
    pytorch, extension = (next(s for s, what in steps.items() if what.startswith(name)) for name in
                          ("build_source", "build_extension"))
    assert not re.search(rf"^#{pytorch} \d+\.\d+ ", build_log, re.M), build_log[-4000:]  # nothing ran in it
    assert re.search(rf"^#{pytorch} (CACHED|DONE)", build_log, re.M), build_log[-4000:]
    assert re.search(rf"^#{extension} \d+\.\d+ .*\bgcc\b", build_log, re.M), build_log[-4000:]  # compiled

    new = registry_manifest(host, dev)
    extension_layer = layer_of_step(host, dev, new, "build_extension.sh")
    assert new["layers"][:extension_layer] == old["layers"][:extension_layer]
    assert new["layers"][extension_layer] != old["layers"][extension_layer]
    labels = docker("image", "inspect", "--format", "{{json .Config.Labels}}", dev, env=second_engine).stdout
    assert f"@{moved}" in json.loads(labels)["torchbake.built.extension"]
