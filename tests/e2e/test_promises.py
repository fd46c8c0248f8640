"""Promises that hold under a hostile week (issue 21), on the real engine: no secret in anything
torchbake prints, writes or builds, and no tag moved to an image that was not built for it."""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
from pathlib import Path

from tests.conftest import run_invoke
from tests.support import serving

from .helpers import docker, labels, make_wheel, saved_contents

WHEEL_SECRET = "wheel-secret-5c1f0e"
CCACHE_SECRET = "ccache-secret-9ad2b7"
GIT_SECRET = "git-secret-3e77c4"
SECRETS = (WHEEL_SECRET, CCACHE_SECRET, GIT_SECRET)


class _AuthHandler(http.server.SimpleHTTPRequestHandler):
    """Files behind Basic auth (builder:WHEEL_SECRET); the first request of each file gets a 503,
    so that the retry line is printed too."""

    seen: set[str] = set()
    expected = "Basic " + base64.b64encode(f"builder:{WHEEL_SECRET}".encode()).decode()

    def do_GET(self):  # noqa: N802 - the server's name for it
        if self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="wheels"')
            self.end_headers()
            return
        if self.path not in self.seen:
            self.seen.add(self.path)
            self.send_error(503)
            return
        super().do_GET()

    def log_message(self, *args):
        pass


def _everything_written(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_no_secret_in_output_logs_manifests_reports_cache_or_image(base_image, tb_env, cache_dir, tmp_path, run_id,
                                                                  tiny_profile):
    www = tmp_path / "www"
    www.mkdir()
    wheel = make_wheel(www, "torchbake-secret-ext", "1.0.0", ["torch"], {"torchbake_secret_ext/__init__.py": "X = 1\n"})
    credentials = tmp_path / "git-credentials"
    credentials.write_text(f"http://builder:{GIT_SECRET}@git.example.invalid\n")
    name = f"torchbake-test/secrets-{run_id}"
    bundle = tmp_path / "ca.pem"  # a CA bundle: given to the build as a secret, named in no document by content
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=torchbake test CA",
                    "-days", "1", "-keyout", str(tmp_path / "ca.key"), "-out", str(bundle)], check=True,
                   capture_output=True)
    pem_body = "".join(bundle.read_text().splitlines()[1:3])
    env = {**tb_env, "TORCHBAKE_DEV_COMPILE_CACHE": f"redis://:{CCACHE_SECRET}@127.0.0.1:6379",
           "TORCHBAKE_DEV_GIT_CREDENTIAL_FILE": str(credentials), "TORCHBAKE_DOWNLOADS_CA_BUNDLE": str(bundle)}
    handler = type("Handler", (_AuthHandler,), {"seen": set(), "__init__": lambda self, *a, **k:
                                                 _AuthHandler.__init__(self, *a, directory=str(www), **k)})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    url = f"http://builder:{WHEEL_SECRET}@127.0.0.1:{httpd.server_address[1]}/{wheel.name}"
    printed = []
    try:
        with serving(httpd):
            dry = run_invoke("build", "--config", str(tiny_profile), "--name", name, "--tag", "1", "--base-img", base_image,
                             "--torch-musa-whl-url", url, "--dry-run", env=env)
            printed.append(dry.stdout + dry.stderr)
            assert dry.returncode == 0, printed[-1][-3000:]
            dev_dry = run_invoke("build", "--config", str(tiny_profile), "--base-img", base_image, "--dry-run", env=env)
            printed.append(dev_dry.stdout + dev_dry.stderr)
            assert dev_dry.returncode == 0, printed[-1][-3000:]
            assert not (cache_dir / "secrets").exists()  # --dry-run writes nothing, a secret least of all
            built = run_invoke("build", "--config", str(tiny_profile), "--name", name, "--tag", "1",
                               "--base-img", base_image, "--torch-musa-whl-url", url, env=env)
            printed.append(built.stdout + built.stderr)
            # the credential works: sent as the request's authorization, the host is the host
            assert built.returncode == 0, printed[-1][-5000:]
            assert f"Download of http://127.0.0.1:{httpd.server_address[1]}/{wheel.name} failed (HTTP 503" in printed[-1]
        for task in (["show-build", f"{name}:1"], ["show-config"], ["show-config", "--format", "toml"],
                     ["build-all", "--plan", "--config", "configs/nightly.toml"], ["sbom", f"{name}:1"],
                     ["sbom", f"{name}:1", "--format", "cyclonedx"], ["provenance", f"{name}:1"]):
            shown = run_invoke(*task, env=env)
            assert shown.returncode == 0, shown.stdout + shown.stderr
            printed.append(shown.stdout + shown.stderr)
        statement = json.loads(printed[-1])  # the provenance names the extension's URL, its credential masked
        dependencies = {d["name"]: d.get("uri", "") for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
        assert dependencies[wheel.name] == url.replace(WHEEL_SECRET, "***")
        assert '"spdxVersion"' in written_documents(cache_dir)  # the documents were searched, not an empty folder
        assert pem_body not in written_documents(cache_dir) and pem_body not in "".join(printed)
        assert labels(f"{name}:1")["torchbake.extension"] == "torchbake-secret-ext==1.0.0"
        history = docker("history", "--no-trunc", f"{name}:1").stdout
        inspect = docker("image", "inspect", f"{name}:1").stdout
        saved = saved_contents(f"{name}:1")
        written = _everything_written(cache_dir)
        for secret in SECRETS:
            for text in printed:
                assert secret not in text, text[-3000:]
            assert secret not in history and secret not in inspect
            assert secret.encode() not in written, "a secret in the cache folder (logs, manifests, records)"
            assert secret.encode() not in saved, "a secret in the image's layers"
        manifest = json.loads(next(p for p in (cache_dir / "logs").glob(f"*secrets-{run_id}*.manifest.json")).read_text())
        given = {entry["option"]: entry["location"] for entry in manifest["inputs"]}
        assert given["wheels.extension"] == url.replace(WHEEL_SECRET, "***")
    finally:
        docker("image", "rm", "--force", f"{name}:1", check=False)


def written_documents(cache_dir) -> str:
    """Every SBOM and provenance statement in the cache folder (beside the build manifests)."""
    return "".join(p.read_text() for suffix in ("*.spdx.json", "*.cdx.json", "*.provenance.json")
                   for p in (cache_dir / "logs").glob(suffix))


def test_a_tag_never_lands_on_an_image_built_for_another_name(tiny_profile, base_image, tb_env, tmp_path, run_id):
    image, other = f"torchbake-test/one-{run_id}:1", f"torchbake-test/other-{run_id}"
    try:
        first = run_invoke("build", "--config", str(tiny_profile), "--name", image.split(":")[0], "--tag", "1",
                           "--base-img", base_image, env=tb_env)
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        # the same inputs under another name: built (labels of its own), never the first image re-tagged
        again = run_invoke("build", "--config", str(tiny_profile), "--name", other, "--tag", "x",
                           "--base-img", base_image, "--no-verify", env=tb_env)
        assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
        assert "retagged" not in again.stdout, again.stdout[-2000:]
        assert docker("image", "inspect", "--format", "{{.Id}}", f"{other}:x").stdout != \
            docker("image", "inspect", "--format", "{{.Id}}", image).stdout
        assert labels(f"{other}:x")["org.opencontainers.image.title"] == other

        # a kept context edited by hand, built with --no-prepare: hashed as it is on disk, so built with the edit
        folder = tmp_path / "context"
        prepared = run_invoke("build", "--config", str(tiny_profile), "--name", other, "--tag", "kept",
                              "--base-img", base_image, "--build-dir", str(folder), "--no-verify", env=tb_env)
        assert prepared.returncode == 0, (prepared.stdout + prepared.stderr)[-3000:]
        pristine = labels(f"{other}:kept")["torchbake.input-hash"]
        with (folder / "Dockerfile").open("a") as dockerfile:
            dockerfile.write("RUN echo edited > /edited-by-hand\n")
        edited = run_invoke("build", "--config", str(tiny_profile), "--name", other, "--tag", "kept",
                            "--base-img", base_image, "--build-dir", str(folder), "--no-prepare", "--no-verify", env=tb_env)
        assert edited.returncode == 0, (edited.stdout + edited.stderr)[-3000:]
        assert "unchanged" not in edited.stdout and "retagged" not in edited.stdout, edited.stdout[-2000:]
        assert docker("run", "--rm", f"{other}:kept", "cat", "/edited-by-hand").stdout == "edited\n"
        assert labels(f"{other}:kept")["torchbake.input-hash"] != pristine
        # prepared without a CA bundle, its Dockerfile mounts no ca_bundle secret (a secret mount
        # costs BuildKit 0.13 a hash of the whole filesystem): a build that now passes one is refused
        (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
        trusting = run_invoke("build", "--config", str(tiny_profile), "--name", other, "--tag", "kept", "--base-img",
                              base_image, "--build-dir", str(folder), "--no-prepare", "--ca-bundle", str(tmp_path / "ca.pem"),
                              "--force", env=tb_env)
        assert trusting.returncode == 2, trusting.stdout + trusting.stderr
        assert f"the context in {folder} was prepared without the secret ca_bundle, which this build passes" \
            in trusting.stderr
        assert "Building" not in trusting.stdout

        # an empty folder never prepared is an error, never "retagged"
        empty = tmp_path / "empty"
        empty.mkdir()
        never = run_invoke("build", "--config", str(tiny_profile), "--name", other, "--tag", "kept",
                           "--base-img", base_image, "--build-dir", str(empty), "--no-prepare", env=tb_env)
        assert never.returncode == 2, never.stdout + never.stderr
        assert "is not a context torchbake prepared" in never.stderr
    finally:
        for reference in (f"{other}:x", f"{other}:kept", image):
            docker("image", "rm", "--force", reference, check=False)


SIGNATURE, CREDENTIAL = "presigned-sig-7d41aa", "AKIA-presigned-cred-0b9e"
RESIGNED = "presigned-sig-2f88c3"  # the same object, signed again later (another signature and date)


class _PresignedHandler(http.server.SimpleHTTPRequestHandler):
    """Files behind an object store's presigned URL: the query's X-Amz-Signature must be one the
    store issued; the file is the path, the query is not part of its name."""

    issued = {SIGNATURE, RESIGNED}
    fetched: list[str] = []  # downloads
    asked: list[str] = []  # conditional requests: whether the file changed (answered 304 when it did not)

    def do_GET(self):  # noqa: N802 - the server's name for it
        path, _, query = self.path.partition("?")
        parameters = dict(p.partition("=")[::2] for p in query.split("&") if p)
        if parameters.get("X-Amz-Signature") not in self.issued or parameters.get("X-Amz-Credential") != CREDENTIAL:
            self.send_error(403)
            return
        (self.asked if self.headers.get("If-Modified-Since") or self.headers.get("If-None-Match") else self.fetched
         ).append(path)
        self.path = path
        super().do_GET()

    def log_message(self, *args):
        pass


def _presigned(port: int, wheel: str, signature: str, date: str) -> str:
    return (f"http://127.0.0.1:{port}/bucket/{wheel}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={CREDENTIAL}"
            f"&X-Amz-Date={date}&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={signature}")


def test_a_presigned_url_builds_its_signature_appears_nowhere_and_a_resigned_one_is_the_same_input(
        base_image, tb_env, cache_dir, tmp_path, run_id, tiny_profile):
    www = tmp_path / "www"
    (www / "bucket").mkdir(parents=True)
    wheel = make_wheel(www / "bucket", "torchbake-presigned-ext", "1.0.0", ["torch"],
                       {"torchbake_presigned_ext/__init__.py": "X = 1\n"})
    handler = type("Handler", (_PresignedHandler,), {"fetched": [], "asked": [], "__init__": lambda self, *a, **k:
                                                     _PresignedHandler.__init__(self, *a, directory=str(www), **k)})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = httpd.server_address[1]
    url = _presigned(port, wheel.name, SIGNATURE, "20261125T100000Z")
    name = f"torchbake-test/presigned-{run_id}"
    common = ["--config", str(tiny_profile), "--name", name, "--tag", "1", "--base-img", base_image]
    printed = []
    try:
        with serving(httpd):
            dry = run_invoke("build", *common, "--torch-musa-whl-url", url, "--dry-run", env=tb_env)
            printed.append(dry.stdout + dry.stderr)
            assert dry.returncode == 0, printed[-1][-3000:]
            built = run_invoke("build", *common, "--torch-musa-whl-url", url, env=tb_env)
            printed.append(built.stdout + built.stderr)
            assert built.returncode == 0, printed[-1][-5000:]
            assert handler.fetched == [f"/bucket/{wheel.name}"]
            # signed again (new signature, new date): the same input, nothing fetched, nothing rebuilt
            again = run_invoke("build", *common, "--torch-musa-whl-url",
                               _presigned(port, wheel.name, RESIGNED, "20261126T080000Z"), env=tb_env)
            printed.append(again.stdout + again.stderr)
            assert again.returncode == 0 and "unchanged" in again.stdout, printed[-1][-3000:]
            assert handler.fetched == [f"/bucket/{wheel.name}"]  # asked whether it changed (304), not fetched
            assert handler.asked == [f"/bucket/{wheel.name}"]
            given = {**tb_env, "TORCHBAKE_WHEELS_EXTENSION": url}
            for task in (["show-build", f"{name}:1"], ["sbom", f"{name}:1"], ["provenance", f"{name}:1"],
                         ["show-config"]):
                shown = run_invoke(*task, env=given)
                assert shown.returncode == 0, shown.stdout + shown.stderr
                printed.append(shown.stdout + shown.stderr)
            toml = run_invoke("show-config", "--format", "toml", env=given)
            assert "X-Amz-Signature=***" in toml.stdout and "X-Amz-Credential=***" in toml.stdout, toml.stdout
            printed.append(toml.stdout + toml.stderr)
        # the file show-config wrote, read back: the masked signature is refused, named, before any work
        written = tmp_path / "written.toml"
        written.write_text(toml.stdout)
        refused = run_invoke("build", "--config", str(written), "--dry-run", env=tb_env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"wheels.extension (from {written}) holds a URL whose password, token or signature was masked" \
            in refused.stderr, refused.stderr
        assert labels(f"{name}:1")["torchbake.extension"] == "torchbake-presigned-ext==1.0.0"
        history = docker("history", "--no-trunc", f"{name}:1").stdout
        inspect = docker("image", "inspect", f"{name}:1").stdout
        saved = saved_contents(f"{name}:1")
        written_files = _everything_written(cache_dir)
        for secret in (SIGNATURE, RESIGNED, CREDENTIAL):
            for text in printed:
                assert secret not in text, text[-3000:]
            assert secret not in history and secret not in inspect
            assert secret.encode() not in written_files, "a signature in the cache folder (logs, manifests, records)"
            assert secret.encode() not in saved, "a signature in the image's layers"
    finally:
        docker("image", "rm", "--force", f"{name}:1", check=False)
