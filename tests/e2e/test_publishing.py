"""One image published with ``invoke build --push``: the image, its SBOMs, its provenance and their
signatures in a real local registry, read back with skopeo and verified with sigstore-js (clients
nobody here wrote), and with ``invoke verify --signatures``."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conftest import ROOT, run_invoke
from torchbake.adapters import registry as registry_module
from torchbake.supply_chain import attestations, signing

from .helpers import docker

PASSWORD = "correct horse 7f3a"

SKOPEO = ["skopeo", "--override-os", "linux", "inspect", "--raw", "--tls-verify=false"]
ARTIFACTS = ["application/spdx+json", "application/spdx+json", "application/vnd.cyclonedx+json",  # SPDX 2.3 and 3
             "application/vnd.in-toto+json"]


def skopeo(*argv: str) -> str:
    done = subprocess.run([*SKOPEO, *argv], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_build_push_publishes_one_image_with_its_attestations(registry, base_image, tiny_profile, tb_env, run_id):
    name = f"torchbake-test/solo-{run_id}"
    image = f"{registry}/team/{name}:1"
    args = ("build", "--config", str(tiny_profile), "--base-img", base_image, "--name", name, "--tag", "1",
            "--registry", f"{registry}/team", "--push")
    try:
        first = run_invoke(*args, env=tb_env)
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
        pushed = re.search(rf"pushed {re.escape(image)}@(sha256:[0-9a-f]{{64}})", first.stdout)
        assert pushed, first.stdout[-2000:]
        digest = pushed.group(1)
        assert hashlib.sha256(skopeo(f"docker://{image}").encode()).hexdigest() == digest.split(":")[1]
        referrers = json.loads(skopeo(f"docker://{image.rsplit(':', 1)[0]}:{digest.replace(':', '-')}"))
        assert sorted(m["artifactType"] for m in referrers["manifests"]) == ARTIFACTS
        # the inputs tag names the same image, so that a machine that never saw it finds it by its inputs
        tags = json.loads(skopeo(f"docker://{image}", "--config"))["config"]["Labels"]
        assert tags["torchbake.input-hash"]
        # a second run: the registry already holds this image; nothing is pushed again, the digest is said
        # the build manifest records what the SBOMs beside it were made with: a push with the same options reads them
        manifest = Path(re.search(r"manifest: (\S+)\)", first.stdout).group(1))
        assert list(json.loads(manifest.read_text())[attestations.MADE_WITH].values()) == [
            attestations.sboms_made_with("")]
        second = run_invoke(*args, env=tb_env)
        assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
        assert "unchanged" in second.stdout and f"pushed {image}@{digest}" in second.stdout
        assert "made again" not in first.stdout + second.stdout
        # [sbom] supplier set after the build: the image is unchanged, the SBOMs the push attaches name it
        # (made again from the build's record): the SPDX document the registry holds passes every row of
        # NTIA's minimum elements (the stand-in torch names its supplier, as the real wheel does)
        supplier = tiny_profile.parent / f"supplier-{run_id}.toml"
        supplier.write_text('[sbom]\nsupplier = "ML Platform <ml-platform@example.com>"\n')
        third = run_invoke(*args, "--config", str(supplier), env=tb_env)
        assert third.returncode == 0, (third.stdout + third.stderr)[-3000:]
        assert "unchanged" in third.stdout and f"pushed {image}@{digest}" in third.stdout  # the same image
        assert f"{image}: its cyclonedx, spdx, spdx3 made again from its build's record" in third.stdout
        assert list(json.loads(manifest.read_text())[attestations.MADE_WITH].values()) == [
            attestations.sboms_made_with("ML Platform <ml-platform@example.com>")]
        repo = image.rsplit(":", 1)[0]
        referrers = json.loads(skopeo(f"docker://{repo}:{digest.replace(':', '-')}"))["manifests"]
        spdx = [read_referrer(repo, m["digest"], supplier.parent) for m in referrers
                if m["annotations"].get(attestations.KIND_ANNOTATION) == "spdx"]
        newest = next(text for text in spdx if "ml-platform@example.com" in text)
        path = supplier.parent / f"pushed-{run_id}.spdx.json"
        path.write_text(newest)
        checker = Path(sys.executable).with_name("ntia-checker")
        judged = subprocess.run([str(checker), "--comply", "ntia", str(path)], capture_output=True, text=True,
                                timeout=300)
        rows = dict(re.findall(r"^(.+?\?)\s*\|\s*(True|False)$", judged.stdout, re.M))
        assert len(rows) == 7 and [row for row, ok in rows.items() if ok == "False"] == [], judged.stdout + judged.stderr
        assert judged.returncode == 0 and "Conformant: True" in judged.stdout, judged.stdout
        document = json.loads(newest)
        assert [p["name"] for p in document["packages"] if p.get("supplier", "NOASSERTION") == "NOASSERTION"] == []
        assert {p["name"]: p["supplier"] for p in document["packages"]}["torch"] == "Organization: PyTorch Team (packages@pytorch.org)"
        assert {p["name"]: p["supplier"] for p in document["packages"]}[f"{registry}/team/{name}"] == (
            "Organization: ML Platform (ml-platform@example.com)")
        assert "Organization: ML Platform (ml-platform@example.com)" in document["creationInfo"]["creators"]
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_push_of_an_image_that_names_no_registry_is_refused_before_any_work(tiny_profile, tb_env, run_id):
    result = run_invoke("build", "--config", str(tiny_profile), "--name", f"torchbake-test/nowhere-{run_id}", "--push",
                        env=tb_env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--push: torchbake-test/nowhere-{run_id}:" in result.stderr and "names no registry" in result.stderr
    assert "--registry HOST[:PORT][/PATH]" in result.stderr
    assert docker("image", "ls", "--quiet", f"torchbake-test/nowhere-{run_id}").stdout.strip() == ""


class PlainRegistry:
    """What anyone with push rights can do to a repository, in plain HTTP (the Distribution API,
    not torchbake's client): upload a blob, put a manifest, rewrite the index under a subject's
    referrers tag (``sha256-<hex>``)."""

    INDEX = "application/vnd.oci.image.index.v1+json"
    MANIFEST = "application/vnd.oci.image.manifest.v1+json"

    def __init__(self, host: str, repository: str):
        self.base = f"http://{host}/v2/{repository}"

    def _send(self, method: str, url: str, data: bytes | None = None, headers: dict | None = None):
        import urllib.request

        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.headers, response.read()

    def blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        headers, _ = self._send("POST", f"{self.base}/blobs/uploads/", b"")
        location = headers["Location"]
        location = location if location.startswith("http") else self.base.split("/v2/")[0] + location
        self._send("PUT", f"{location}{'&' if '?' in location else '?'}digest={digest}", data,
                   {"Content-Type": "application/octet-stream"})
        return digest

    def artifact(self, subject: str, artifact_type: str, document: str | bytes, annotations: dict) -> dict:
        """An artifact manifest carrying ``document``, whose subject is the manifest ``subject``;
        its descriptor, as an index lists it."""
        data = document if isinstance(document, bytes) else document.encode()
        self.blob(b"{}")
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": self.MANIFEST, "artifactType": artifact_type,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest(),
                       "size": 2},
            "layers": [{"mediaType": artifact_type, "digest": self.blob(data), "size": len(data)}],
            "subject": {"mediaType": self.MANIFEST, "digest": subject, "size": 0}}).encode()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        self._send("PUT", f"{self.base}/manifests/{digest}", manifest, {"Content-Type": self.MANIFEST})
        return {"mediaType": self.MANIFEST, "digest": digest, "size": len(manifest), "artifactType": artifact_type,
                "annotations": annotations}

    def referrers(self, subject: str) -> list[dict]:
        _, body = self._send("GET", f"{self.base}/manifests/{subject.replace(':', '-')}", headers={"Accept": self.INDEX})
        return json.loads(body)["manifests"]

    def set_referrers(self, subject: str, manifests: list[dict]) -> None:
        index = json.dumps({"schemaVersion": 2, "mediaType": self.INDEX, "manifests": manifests}).encode()
        self._send("PUT", f"{self.base}/manifests/{subject.replace(':', '-')}", index, {"Content-Type": self.INDEX})


def read_referrer(repo: str, digest: str, folder: Path) -> str:
    """The document an artifact manifest carries, copied out with skopeo."""
    copied = folder / digest.split(":")[1]
    done = subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{repo}@{digest}",
                           f"dir:{copied}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    manifest = json.loads(skopeo(f"docker://{repo}@{digest}"))
    return (copied / manifest["layers"][0]["digest"].split(":")[1]).read_text()


def sigstore_js(bundle: str, public: Path, hint: str, folder: Path) -> subprocess.CompletedProcess:
    path = folder / f"bundle-{hashlib.sha256(bundle.encode()).hexdigest()[:12]}.json"
    path.write_text(bundle)
    return subprocess.run(["node", str(ROOT / "tests" / "js" / "verify-bundle.js"), str(path), str(public), hint],
                          capture_output=True, text=True, timeout=60)


class Tampering:
    """Signs as the key does, then changes one byte of what was signed."""

    def __init__(self, signer):
        self.signer = signer

    def bundle(self, statement) -> str:
        data = json.loads(self.signer.bundle(statement))
        payload = bytearray(base64.b64decode(data["dsseEnvelope"]["payload"]))
        payload[-3] ^= 1
        data["dsseEnvelope"]["payload"] = base64.b64encode(bytes(payload)).decode()
        return json.dumps(data)


def test_a_signed_push_is_proven_with_the_public_key_alone_and_a_tampered_or_foreign_one_fails(
        registry, base_image, tiny_profile, tb_env, run_id, tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    private, public, password = tmp_path / "signing.pem", tmp_path / "signing.pub", tmp_path / "password"
    password.write_text(f"{PASSWORD}\n")
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.BestAvailableEncryption(PASSWORD.encode())))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    name = f"torchbake-test/signed-{run_id}"
    image = f"{registry}/team/{name}:1"
    repo = image.rsplit(":", 1)[0]
    env = {**tb_env, "TORCHBAKE_SIGN_PASSWORD_FILE": str(password)}
    try:
        built = run_invoke("build", "--config", str(tiny_profile), "--base-img", base_image, "--name", name, "--tag",
                           "1", "--registry", f"{registry}/team", "--push", "--sign-key", str(private), env=env)
        assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
        digest = re.search(rf"pushed {re.escape(image)}@(sha256:[0-9a-f]{{64}})", built.stdout).group(1)
        referrers = json.loads(skopeo(f"docker://{repo}:{digest.replace(':', '-')}"))["manifests"]
        bundles = [m for m in referrers if m["artifactType"] == signing.BUNDLE_TYPE]
        assert sorted(m["annotations"]["dev.torchbake.attestation"] for m in bundles) == [
            "signature-cyclonedx", "signature-image", "signature-provenance", "signature-spdx", "signature-spdx3"]
        hint = signing.read_public_key(public).hint
        texts = {m["annotations"]["dev.torchbake.attestation"]: read_referrer(repo, m["digest"], tmp_path)
                 for m in referrers}
        for kind in ("signature-image", "signature-spdx", "signature-spdx3", "signature-cyclonedx", "signature-provenance"):
            judged = sigstore_js(texts[kind], public, hint, tmp_path)  # a verifier nobody here wrote
            assert judged.returncode == 0 and "verified" in judged.stdout, (kind, judged.stdout + judged.stderr)
            statement = json.loads(base64.b64decode(json.loads(texts[kind])["dsseEnvelope"]["payload"]))
            assert statement["subject"][0]["digest"] == {"sha256": digest.split(":")[1]}
        spdx_statement = json.loads(base64.b64decode(json.loads(texts["signature-spdx"])["dsseEnvelope"]["payload"]))
        assert spdx_statement["predicate"] == json.loads(texts["spdx"])  # the very SBOM beside the image
        spdx3 = json.loads(base64.b64decode(json.loads(texts["signature-spdx3"])["dsseEnvelope"]["payload"]))
        assert spdx3["predicateType"] == "https://spdx.dev/Document/v3.0.1" and spdx3["predicate"] == json.loads(texts["spdx3"])
        secrets = (PASSWORD, private.read_text().splitlines()[1])
        for text in (built.stdout, built.stderr, *texts.values()):
            assert not any(secret in text for secret in secrets)
        checked = run_invoke("verify", image, "--signatures", "--key", str(public), env=tb_env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.count("ok: signed by") == 5 and "FAILED" not in checked.stdout
        assert checked.stdout.count("covered by a signature of the key") == 4  # each SBOM and the provenance

        # Someone with push rights rewrites the referrers index in plain HTTP: whatever the order
        # of its entries, an SBOM no signature of the key covers fails, as does missing evidence
        plain = PlainRegistry(registry, f"team/{name}")
        original = plain.referrers(digest)
        forged = json.loads(texts["spdx"])
        forged["packages"].append({"SPDXID": "SPDXRef-Package-backdoor", "name": "backdoor", "versionInfo": "1.0",
                                   "downloadLocation": "NOASSERTION"})
        unsigned = plain.artifact(digest, "application/spdx+json", json.dumps(forged),
                                  {"dev.torchbake.attestation": "spdx"})
        image_signature = next(m for m in original if m["annotations"]["dev.torchbake.attestation"] == "signature-image")
        elsewhere = signing.Signer(private, password).bundle(signing.statement(
            name, "sha256:" + "0" * 64, signing.PREDICATE_TYPES["spdx"], json.loads(texts["spdx"])))
        stray = plain.artifact(digest, signing.BUNDLE_TYPE, elsewhere, {"dev.torchbake.attestation": "signature-spdx"})
        # the same unsigned SBOM under its manifest's own other type: its content says what it is
        untyped = plain.artifact(digest, "application/octet-stream", json.dumps(forged), {})
        # the signed provenance's predicate under another subject or predicate type
        provenances = [json.loads(texts["provenance"]) for _ in range(2)]
        provenances[0]["subject"][0]["digest"] = {"sha256": "0" * 64}
        provenances[1]["predicateType"] = "https://example.com/anything"
        rewritten = [plain.artifact(digest, "application/vnd.in-toto+json", json.dumps(p), {}) for p in provenances]
        others = [m for m in original if m["annotations"]["dev.torchbake.attestation"] != "provenance"]
        hostile = [plain.artifact(digest, signing.BUNDLE_TYPE, data, {}) for data in (
            b"[" * 100_000 + b"]" * 100_000, b'{"dsseEnvelope": "\xff\xfe"}')]
        for referrers, says in (
                ([unsigned, *original], f"SPDX SBOM {unsigned['digest'][:19]}: no signature of the key covers it"),
                ([*original, unsigned], f"SPDX SBOM {unsigned['digest'][:19]}: no signature of the key covers it"),
                ([unsigned, image_signature], "SPDX SBOM: missing: required ([verify] require)"),
                ([image_signature], "provenance: missing: required ([verify] require)"),
                ([*original, stray], f"signature {stray['digest'][:19]}: the bundle is about {'0' * 64}"),
                # the index relabels the unsigned SBOM, or drops its type
                ([*original, {**unsigned, "artifactType": "application/vnd.example.notes"}],
                 f"SPDX SBOM {unsigned['digest'][:19]}: no signature of the key covers it"),
                ([*original, {k: v for k, v in unsigned.items() if k != "artifactType"}],
                 f"SPDX SBOM {unsigned['digest'][:19]}: no signature of the key covers it"),
                ([*original, untyped], f"SPDX SBOM {untyped['digest'][:19]}: no signature of the key covers it"),
                ([*others, rewritten[0]], "signs a provenance of another image than this manifest"),
                ([*others, rewritten[1]], "signs another provenance than the one beside the image"),
                ([*original, hostile[0]], f"signature {hostile[0]['digest'][:19]}: the bundle is not a Sigstore bundle"),
                ([*original, hostile[1]], f"signature {hostile[1]['digest'][:19]}: the bundle is not a Sigstore bundle: it is not UTF-8")):
            plain.set_referrers(digest, referrers)
            attacked = run_invoke("verify", image, "--signatures", "--key", str(public), env=tb_env)
            assert attacked.returncode == 11 and says in attacked.stderr, (says, attacked.stdout + attacked.stderr)
            assert "Traceback" not in attacked.stderr
        plain.set_referrers(digest, [image_signature])  # a team that requires the signature alone
        alone = run_invoke("verify", image, "--signatures", "--key", str(public), "--require", "image", env=tb_env)
        assert alone.returncode == 0, alone.stdout + alone.stderr
        plain.set_referrers(digest, original)
        again = run_invoke("verify", image, "--signatures", "--key", str(public), env=tb_env)
        assert again.returncode == 0, again.stdout + again.stderr

        # Someone with registry access replaces the image's own signature with one of another key ...
        remote = registry_module.Registry(registry, insecure=True)
        other = tmp_path / "other.pem"
        other.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        attestations.attach(remote, f"team/{name}", "1", {}, "", signing.Signer(other))
        foreign = run_invoke("verify", image, "--signatures", "--key", str(public), env=tb_env)
        assert foreign.returncode == 11, foreign.stdout + foreign.stderr
        assert "signature of the manifest" in foreign.stderr and "names another key" in foreign.stderr
        # ... or with the key's own signatures of statements changed after signing
        attestations.attach(remote, f"team/{name}", "1", {"spdx": texts["spdx"]}, "",
                            Tampering(signing.Signer(private, password)))
        tampered = run_invoke("verify", image, "--signatures", "--key", str(public), env=tb_env)
        assert tampered.returncode == 11, tampered.stdout + tampered.stderr
        assert "no signature that matches" in tampered.stderr
        changed = json.loads(skopeo(f"docker://{repo}:{digest.replace(':', '-')}"))["manifests"]
        spdx_bundle = next(m for m in changed if m["annotations"]["dev.torchbake.attestation"] == "signature-spdx")
        judged = sigstore_js(read_referrer(repo, spdx_bundle["digest"], tmp_path), public, hint, tmp_path)
        assert judged.returncode == 1 and "SIGNATURE_ERROR" in judged.stderr, judged.stdout + judged.stderr
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_a_tag_lands_in_the_registry_only_on_an_image_that_names_it(registry, base_image, tiny_profile, tb_env, run_id):
    """`:a` pushed, then `:b` of the same inputs: `:b` is built and pushed as itself, never pointed
    at `:a`'s image, whose version label says `a` (skopeo reads the labels back)."""
    name = f"torchbake-test/labelled-{run_id}"
    repo = f"{registry}/team/{name}"
    outputs = []
    try:
        for tag in ("a", "b"):
            result = run_invoke("build", "--config", str(tiny_profile), "--base-img", base_image, "--name", name,
                                "--tag", tag, "--registry", f"{registry}/team", "--push", "--no-verify", env=tb_env)
            assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
            outputs.append(result.stdout)
        assert "retagged" not in outputs[1] and f"Built {repo}:b" in outputs[1], outputs[1][-3000:]
        for tag in ("a", "b"):
            config = json.loads(skopeo("--config", f"docker://{repo}:{tag}").replace("\n", ""))
            assert config["config"]["Labels"]["org.opencontainers.image.version"] == tag
    finally:
        for tag in ("a", "b"):
            docker("image", "rm", "--force", f"{repo}:{tag}", check=False)


def test_a_from_image_must_prove_who_made_it_before_anything_is_built_on_it(
        registry, base_image, tiny_profile, tb_env, run_id, tmp_path):
    """[verify] base_key: the chain a team runs (a signed push, then a build FROM it), and what
    stops it before any build step: no signatures, another key's, a local image under the
    registry's name."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "signing.pem", tmp_path / "signing.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    name = f"torchbake-test/signed-base-{run_id}"
    base = f"{registry}/team/{name}:1"
    derived = f"torchbake-test/on-signed-base-{run_id}"
    policy = {**tb_env, "TORCHBAKE_VERIFY_BASE_KEY": str(public)}
    build_on = ("build", "--config", str(tiny_profile), "--base-img", base, "--name", derived, "--tag", "1",
                "--no-verify")
    try:
        pushed = run_invoke("build", "--config", str(tiny_profile), "--base-img", base_image, "--name", name, "--tag",
                            "1", "--registry", f"{registry}/team", "--push", "--sign-key", str(private), env=tb_env)
        assert pushed.returncode == 0, (pushed.stdout + pushed.stderr)[-3000:]
        digest = re.search(rf"pushed {re.escape(base)}@(sha256:[0-9a-f]{{64}})", pushed.stdout).group(1)

        planned = run_invoke(*build_on, "--dry-run", env=policy)
        assert planned.returncode == 0, planned.stdout + planned.stderr
        assert f"FROM image: {base} is {digest} in its registry, signed by" in planned.stdout, planned.stdout[-2000:]
        # the same image named by its digest too (HOST/NAME:TAG@DIGEST)
        pinned = run_invoke(*build_on[:4], f"{base}@{digest}", *build_on[5:], "--dry-run", env=policy)
        assert pinned.returncode == 0 and f"FROM image: {base}@{digest} is {digest}" in pinned.stdout, pinned.stderr
        built = run_invoke(*build_on, env=policy)
        assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
        provenance = json.loads(run_invoke("provenance", f"{derived}:1", env=tb_env).stdout)
        (dependency,) = [d for d in provenance["predicate"]["buildDefinition"]["resolvedDependencies"]
                         if d["name"] == "base image"]
        assert dependency["digest"] == {"sha256": digest.split(":")[1]}
        assert dependency["annotations"]["verifiedBy"].startswith(f"signatures and evidence by {signing.read_public_key(public).hint}")

        plain = PlainRegistry(registry, f"team/{name}")
        original = plain.referrers(digest)
        other = tmp_path / "other.pem"
        other.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        for attack, says in (
                (lambda: plain.set_referrers(digest, []), "signature of the manifest: missing"),
                (lambda: attestations.attach(registry_module.Registry(registry, insecure=True), f"team/{name}", "1", {},
                                             "", signing.Signer(other)), "names another key")):
            attack()
            refused = run_invoke(*build_on, "--force", env=policy)
            assert refused.returncode == 11, refused.stdout + refused.stderr
            assert says in refused.stderr and f"the FROM image {base} ({digest}) does not prove" in refused.stderr
            assert "Building" not in refused.stdout and "buildx build" not in refused.stdout
            plain.set_referrers(digest, original)
        # the registry's image is proven, the engine's copy under its name is another image
        docker("tag", base_image, base)
        for planned_only in (("--dry-run",), ()):  # the dry run gives the build's verdict
            local = run_invoke(*build_on, "--force", *planned_only, env=policy)
            assert local.returncode == 11 and f"not the registry's verified {digest}" in local.stderr, local.stderr
            assert "Building" not in local.stdout
    finally:
        docker("image", "rm", "--force", base, f"{derived}:1", check=False)
