"""Intercepting proxies: a network step inside `docker build` reaches an HTTPS server whose
certificate only a private CA vouches for. With --ca-bundle the step trusts it (the bundle is a
BuildKit secret, in no layer); without, the step fails on the certificate, TLS never turned off."""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from pathlib import Path

from tests.conftest import run_invoke
from tests.leftovers import host_lock
from tests.support import DEV_CACHE, flaky_server, make_test_ca

from .helpers import docker, http_server, saved_contents

SECRET_WORD = b"reached-through-the-private-ca"


def toolkit_that_fetches(url: str) -> bytes:
    """A vendor toolkit whose installer downloads something over HTTPS, as real ones do."""
    script = ("#!/bin/bash\nset -euo pipefail\n"
              f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}').read().decode())\"\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("kit/install.sh")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script.encode()))
    return buffer.getvalue()


def test_build_steps_trust_the_ca_bundle_and_keep_it_out_of_layers(base_image, tb_env, tmp_path, run_id, tiny_profile):
    ca, cert, key = make_test_ca(tmp_path / "ca")
    config = tmp_path / "host-network.toml"
    config.write_text('[build]\nnetwork = "host"\n')  # the test's HTTPS server listens on the build host
    www = tmp_path / "www"
    www.mkdir()
    repository = f"torchbake-test/trust-{run_id}"
    with flaky_server(SECRET_WORD, [], tls=(cert, key)) as (https_url, seen), http_server(www) as url:
        (www / "kit.tar.gz").write_bytes(toolkit_that_fetches(f"{https_url}/check"))
        digest = hashlib.sha256((www / "kit.tar.gz").read_bytes()).hexdigest()
        args = ["build", "--config", str(tiny_profile), "--config", str(config), "--name", repository,
                "--base-img", base_image, "--musa-toolkits-url", f"{url}/kit.tar.gz#sha256={digest}", "--no-verify"]
        refused = run_invoke(*args, "--tag", "no-ca", env=tb_env)
        assert refused.returncode == 5, refused.stdout[-3000:] + refused.stderr
        assert "CERTIFICATE_VERIFY_FAILED" in refused.stdout
        assert docker("image", "inspect", f"{repository}:no-ca", check=False).returncode != 0

        trusted = run_invoke(*args, "--tag", "ca", "--ca-bundle", str(ca), env=tb_env)
        assert trusted.returncode == 0, trusted.stdout[-3000:] + trusted.stderr
        assert SECRET_WORD.decode() in trusted.stdout  # the installer's HTTPS fetch went through
        assert "torchbake: trusting the CA bundle given with --ca-bundle for this step" in trusted.stdout
        assert "--secret id=ca_bundle,src=" in trusted.stdout
    try:
        saved = saved_contents(f"{repository}:ca")
        # docker save: the layers (uncompressed), the config and the history. No line of the bundle's
        # body is in any of them (a `cp "$TORCHBAKE_CA" …` or an ENV holding it would put them there).
        body = [line.encode() for line in ca.read_text().splitlines() if line and not line.startswith("-----")]
        assert len(body) > 10 and all(len(line) >= 40 for line in body[:-1])
        assert [line for line in body if line in saved] == []
    finally:
        docker("image", "rm", "--force", f"{repository}:ca", check=False)


def teams_ca() -> Path:
    """The CA of this machine's test runs, as a team's CA: the same from run to run (made again
    when a day old; it is valid for two). The step that writes a bundle into the trust store is the
    OS packages step, keyed by the bundle's digest: a new CA every run made it fetch and install
    the OS packages again each time (14 s here, 2026-11-30)."""
    import filelock

    folder = DEV_CACHE / "team-ca"
    with filelock.FileLock(host_lock("team-ca")):
        ca = folder / "ca.pem"
        if not ca.is_file() or time.time() - ca.stat().st_mtime > 86400:
            ca, _cert, _key = make_test_ca(folder)
    return ca


def test_pip_instead_of_uv_no_uv_kept_and_the_bundle_in_the_trust_store_when_asked(base_image, tb_env, tmp_path,
                                                                                    run_id, tiny_profile):
    """[python] installer = "pip", keep_uv = false and [downloads] ca_bundle_in_image = true, in one
    real build: pip installed every group, the image has no uv, the bundle is in the image's trust
    store (the one case where it is written into a layer: the user asked), and the image verifies."""
    ca = teams_ca()
    kept = tmp_path / "kept.toml"  # the stand-in profile leaves uv out: here the options file is what does
    kept.write_text(tiny_profile.read_text().replace("keep_uv = false", "keep_uv = true"))
    options = tmp_path / "options.toml"
    options.write_text('[python]\ninstaller = "pip"\nkeep_uv = false\n[downloads]\nca_bundle_in_image = true\n')
    image = f"torchbake-test/trust-options-{run_id}:1"
    result = run_invoke("build", "--config", str(kept), "--config", str(options), "--name", image.split(":")[0],
                        "--tag", "1", "--base-img", base_image, "--ca-bundle", str(ca), env=tb_env)
    output = result.stdout + result.stderr
    try:
        assert result.returncode == 0, output[-4000:]
        assert "torchbake: uv is not kept in the image ([python] keep_uv = false)" in output
        assert "torch pinned" in output
        # what installed each package, as the image records it (its steps may come from the engine's
        # cache, their output unseen): pip, every one; and uv not in the image
        installers = docker("run", "--rm", image, "sh", "-c", "cd /opt/venv/lib/python3*/site-packages &&"
                            " for f in *.dist-info/INSTALLER; do echo \"${f%%-*} $(cat \"$f\")\"; done").stdout.split("\n")
        assert "torch pip" in installers and {line.split()[1] for line in installers if line} == {"pip"}, installers
        probe = docker("run", "--rm", image, "sh", "-c", "command -v uv || echo no-uv;"
                       " cat /usr/local/share/ca-certificates/torchbake-ca-bundle.crt").stdout
        assert probe.startswith("no-uv\n"), probe[:200]
        assert ca.read_text().strip() in probe.split("\n", 1)[1]  # the bundle torchbake trusts: the system's and this CA
    finally:
        docker("image", "rm", "--force", image, check=False)
