"""Signatures: keys read (and refused) as users give them, Sigstore bundles that sigstore-js (a
verifier nobody here wrote) accepts, and tampered or foreign ones that both it and torchbake's own
check reject."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import types

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.conftest import ROOT
from torchbake.checks import signatures
from torchbake.core.errors import ConfigurationError, SignatureError
from torchbake.supply_chain import attestations, signing

JS = ROOT / "tests" / "js"
DIGEST = "sha256:" + "ab" * 32
PASSWORD = "correct horse 7f3a"


def write_key(folder, name, key, password: str | None = None):
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    private = folder / f"{name}.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    public = folder / f"{name}.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return {"ec": write_key(folder, "ec", ec.generate_private_key(ec.SECP256R1())),
            "ed": write_key(folder, "ed", ed25519.Ed25519PrivateKey.generate()),
            "locked": write_key(folder, "locked", ec.generate_private_key(ec.SECP256R1()), PASSWORD),
            "rsa": write_key(folder, "rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            "p384": write_key(folder, "p384", ec.generate_private_key(ec.SECP384R1()))}


def sigstore_js(bundle: str, public, hint: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "bundle.json"
    path.write_text(bundle)
    return subprocess.run(["node", str(JS / "verify-bundle.js"), str(path), str(public), hint],
                          capture_output=True, text=True, timeout=60)


def tampered(bundle: str) -> str:
    data = json.loads(bundle)
    payload = base64.b64decode(data["dsseEnvelope"]["payload"]).replace(b"abab", b"abac", 1)
    data["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    return json.dumps(data)


@pytest.mark.parametrize("kind", ["ec", "ed"])
def test_a_bundle_verifies_with_sigstore_js_and_with_torchbake_and_says_what_it_signs(keys, kind, tmp_path):
    private, public = keys[kind]
    signer = signing.Signer(private)
    bundle = signer.bundle(signing.statement("reg.example/team/x", DIGEST, signing.IMAGE_PREDICATE, {}))
    assert json.loads(bundle)["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    key = signing.read_public_key(public)
    assert key.hint == signer.public_key.hint
    judged = sigstore_js(bundle, public, key.hint, tmp_path)
    assert judged.returncode == 0 and "verified" in judged.stdout, judged.stdout + judged.stderr
    statement = signing.open_bundle(bundle, key)
    assert statement["subject"] == [{"name": "reg.example/team/x", "digest": {"sha256": "ab" * 32}}]
    assert statement["predicateType"] == "https://sigstore.dev/cosign/sign/v1"
    assert private.read_text() not in bundle


def test_a_tampered_bundle_and_one_by_another_key_are_rejected_by_both(keys, tmp_path):
    signer = signing.Signer(keys["ec"][0])
    bundle = signer.bundle(signing.statement("x", DIGEST, signing.IMAGE_PREDICATE, {}))
    key = signing.read_public_key(keys["ec"][1])
    changed = tampered(bundle)
    judged = sigstore_js(changed, keys["ec"][1], key.hint, tmp_path)
    assert judged.returncode == 1 and "SIGNATURE_ERROR" in judged.stderr, judged.stdout + judged.stderr
    with pytest.raises(SignatureError, match="no signature that matches"):
        signing.open_bundle(changed, key)
    foreign = signing.Signer(keys["ed"][0]).bundle(signing.statement("x", DIGEST, signing.IMAGE_PREDICATE, {}))
    with pytest.raises(SignatureError, match="names another key"):
        signing.open_bundle(foreign, key)
    forged = json.loads(foreign)  # another key's signature under this key's name
    forged["verificationMaterial"]["publicKey"]["hint"] = key.hint
    judged = sigstore_js(json.dumps(forged), keys["ec"][1], key.hint, tmp_path)
    assert judged.returncode == 1, judged.stdout
    with pytest.raises(SignatureError, match="no signature that matches"):
        signing.open_bundle(json.dumps(forged), key)
    for broken in ("{}", "not json", json.dumps({**json.loads(bundle), "mediaType": "x"})):
        with pytest.raises(SignatureError):
            signing.open_bundle(broken, key)


def test_an_encrypted_key_opens_with_its_password_file_only(keys, tmp_path):
    private, _ = keys["locked"]
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    assert signing.Signer(private, password).public_key.hint
    with pytest.raises(ConfigurationError, match=r"is encrypted and no password was given: set \[sign\] password_file"):
        signing.Signer(private)
    password.write_text("wrong\n")
    with pytest.raises(ConfigurationError, match="is not a PEM private key .*, or not one this password opens") as wrong:
        signing.Signer(private, password)
    assert "wrong" not in str(wrong.value).replace("this password", "")
    password.write_text("")
    with pytest.raises(ConfigurationError, match="is empty"):
        signing.Signer(private, password)
    with pytest.raises(ConfigurationError, match="is not encrypted"):
        signing.Signer(keys["ec"][0], tmp_path / "password2") if (tmp_path / "password2").write_text("x") else None


@pytest.mark.parametrize(("kind", "says"), [("rsa", r"an RSA key \(\d+ bits\)"),
                                           ("p384", "an ECDSA key on the curve secp384r1")])
def test_a_key_of_another_kind_is_refused_naming_what_is_accepted(keys, kind, says):
    with pytest.raises(ConfigurationError, match=f"is {says}; torchbake signs with ECDSA P-256 or Ed25519"):
        signing.Signer(keys[kind][0])


def test_keys_that_are_not_keys_are_refused_without_showing_them(tmp_path):
    secret = tmp_path / "notes.pem"
    secret.write_text("my secret notes\n")
    for path in (secret, tmp_path / "missing.pem"):
        with pytest.raises(ConfigurationError) as refused:
            signing.Signer(path)
        assert "my secret notes" not in str(refused.value) and str(path) in str(refused.value)
    with pytest.raises(ConfigurationError, match="is not a PEM public key"):
        signing.read_public_key(secret)


def test_what_is_signed_for_a_manifest_is_its_own_statement_and_one_per_attestation():
    spdx = {"spdxVersion": "SPDX-2.3", "packages": []}
    provenance = {"_type": "https://in-toto.io/Statement/v1", "subject": [], "predicateType": "https://slsa.dev/provenance/v1",
                  "predicate": {"buildDefinition": {"buildType": "t"}}}
    found = signing.statements("reg/x", DIGEST, {"spdx": json.dumps(spdx), "provenance": json.dumps(provenance)})
    assert list(found) == ["image", "spdx", "provenance"]
    assert all(s["subject"][0]["digest"] == {"sha256": "ab" * 32} for s in found.values())
    assert found["spdx"]["predicate"] == spdx and found["spdx"]["predicateType"] == "https://spdx.dev/Document"
    assert found["provenance"]["predicate"] == provenance["predicate"]


def test_the_image_an_sbom_describes_is_read_from_either_format():
    spdx = {"relationships": [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                               "relatedSpdxElement": "SPDXRef-image"}],
            "packages": [{"SPDXID": "SPDXRef-other", "checksums": [{"algorithm": "SHA256", "checksumValue": "no"}]},
                         {"SPDXID": "SPDXRef-image", "checksums": [{"algorithm": "SHA256", "checksumValue": "cfg"}]}]}
    cyclonedx = {"metadata": {"component": {"hashes": [{"alg": "SHA-256", "content": "cfg"}]}}}
    assert signatures.described_image("spdx", spdx) == signatures.described_image("cyclonedx", cyclonedx) == "cfg"
    assert signatures.described_image("spdx", {}) == ""


@pytest.mark.parametrize(("args", "says"), [
    (("verify", "reg.example/x:1", "--key", "k.pub"), "--key says whose signatures --signatures checks"),
    (("verify", "reg.example/x:1", "--identity", "me@example.com"), "--identity says whose signatures --signatures"),
    (("verify", "reg.example/x:1", "--require", "spdx"), "--require says what evidence --signatures checks"),
    (("verify", "reg.example/x:1", "--signatures", "--key", "{pub}", "--require", "sbom"),
     "verify.require = ['sbom'] (from command line) is invalid: expected one of: image, spdx, spdx3, cyclonedx,"),
    (("verify", "reg.example/x:1", "--signatures"), "verify --signatures needs whose signatures to check"),
    (("verify", "reg.example/x:1", "--signatures", "--identity", "me@example.com"), "--identity and --issuer go together"),
    (("verify", "reg.example/x:1", "--signatures", "--identity", "me@example.com", "--issuer", "http://id.example"),
     "--issuer 'http://id.example' is invalid: expected the OIDC issuer's https:// URL"),
    (("verify", "reg.example/x:1", "--signatures", "--key", "{pub}", "--identity", "a", "--issuer", "https://i"),
     "give one or the other"),
    (("verify", "x:1", "--signatures", "--key", "{pub}"), "verify --signatures reads the registry, and x:1 names none"),
    (("verify", "reg.example/x:1", "--signatures", "--gpus"), "--gpus: not with --signatures"),
    (("verify", "reg.example/x:1", "--signatures", "--key", "{key}"), "is not a PEM public key"),
    (("build", "--release", "--push"), "--push: torchbake/pytorch-cpu:2.13.0-py3.11 names no registry"),
    (("build", "--release", "--push", "--registry", "reg.example/t", "--sign-key", "{key}"),
     "notes.pem is not a PEM private key (ECDSA P-256 or Ed25519).\n"),
    (("build", "--release", "--push", "--registry", "reg.example/t", "--sign-key", "{rsa}"),
     "rsa.pem is an RSA key (2048 bits); torchbake signs with ECDSA P-256 or Ed25519 keys."),
    (("build", "--release", "--push", "--registry", "reg.example/t", "--sign-key", "{zero}"),
     "(from command line) is invalid: it is a device (a link to /dev/zero); expected a regular file"),
    (("build", "--release", "--push", "--registry", "reg.example/t", "--sign-key", "{pub}", "--config", "{fifo}"),
     "sign.password_file = '{fifo_path}' (from {fifo}) is invalid: it is a FIFO (a named pipe); expected a regular file"),
    (("build-base", "--push", "--sign-key", "/no/such.pem"), "sign.key = '/no/such.pem' (from command line) is invalid"),
    (("build", "--release", "--sign-key", "{pub}"), "--sign-key signs what --push publishes, and nothing is pushed"),
    (("build-all", "--sign-key", "{pub}"), "--sign-key signs what --push publishes, and nothing is pushed"),
    (("build", "--release", "--push", "--registry", "reg.example/t", "--config", "{token:garbage}"),
     "holds no usable OIDC identity token (Identity token is malformed or missing claims)"),
    (("build", "--release", "--push", "--registry", "reg.example/t", "--config", "{token:expired}"),
     "holds no usable OIDC identity token"),
    (("build", "--release", "--push", "--registry", "reg.example/t", "--sign-key", "{pub}", "--config", "{token:fresh}"),
     "[sign] key and [sign] identity_token_file are set: sign with a key or keylessly with one identity"),
])
def test_signing_and_pushing_flags_are_refused_before_any_work_naming_what_is_wrong(args, says, tmp_path, keys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.conftest import run_invoke

    notes = tmp_path / "notes.pem"
    notes.write_text("my secret notes\n")
    (tmp_path / "rsa.pem").write_bytes(rsa.generate_private_key(65537, 2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (tmp_path / "zero.pem").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "password")  # a reader of it would wait for ever
    (tmp_path / "fifo.toml").write_text(f'[sign]\npassword_file = "{tmp_path / "password"}"\n')
    names = {"key": notes, "pub": keys["ec"][1], "rsa": tmp_path / "rsa.pem", "zero": tmp_path / "zero.pem",
             "fifo": tmp_path / "fifo.toml", "fifo_path": tmp_path / "password"}
    args = [identity_token_config(tmp_path, a[7:-1]) if a.startswith("{token:") else a.format(**names) for a in args]
    says = says.format(**names) if "{" in says and "{token" not in says else says
    result = run_invoke(*args, "--docker", "/no/such/docker", env={"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "c")})
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr and "my secret notes" not in result.stderr
    assert not (tmp_path / "c").exists()  # nothing written: refused before any work


def oidc_token(expires_in: int) -> str:
    """A JWT shaped as a CI job's id-token for Sigstore (unsigned: nothing offline checks the
    issuer's signature; Fulcio would)."""
    import time

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"iss": "https://token.actions.githubusercontent.com", "aud": "sigstore", "sub": "repo:team/images",
              "iat": now - 60, "nbf": now - 60, "exp": now + expires_in}
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def identity_token_config(folder, kind: str) -> str:
    """A config file whose [sign] identity_token_file holds a ``kind`` token (garbage, expired, fresh)."""
    token = folder / f"token-{kind}"
    token.write_text({"garbage": "not-a-token\n", "expired": oidc_token(-600), "fresh": oidc_token(600)}[kind])
    config = folder / f"sign-{kind}.toml"
    config.write_text(f'[sign]\nidentity_token_file = "{token}"\n')
    return str(config)


def test_keyless_signing_without_sigstore_is_refused_before_any_build_and_the_token_is_printed_nowhere(tmp_path):
    """sigstore-python finds no Sigstore trust root (no network here; a proxy that refuses makes
    sure): exit 10 before anything is built; the token appears in no output."""
    from tests.conftest import run_invoke

    config = identity_token_config(tmp_path, "fresh")
    env = {"TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path / "c"), "HTTPS_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "HOME": str(tmp_path)}
    result = run_invoke("build", "--release", "--push", "--registry", "reg.example/t", "--config", config,
                        "--docker", "/no/such/docker", env=env)
    assert result.returncode == 10, result.stdout + result.stderr
    assert "Keyless signing needs Sigstore's public instance" in result.stderr and "nothing was built" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "c").exists()
    token = (tmp_path / "token-fresh").read_text()
    assert token.split(".")[1] not in result.stdout + result.stderr


def test_a_key_signed_bundle_does_not_pass_for_a_keyless_identity(keys):
    bundle = signing.Signer(keys["ec"][0]).bundle(signing.statement("x", DIGEST, signing.IMAGE_PREDICATE, {}))
    with pytest.raises(SignatureError, match="is not a keyless Sigstore bundle with a certificate and a log entry"):
        signing.Identity("me@example.com", "https://accounts.example").open(bundle)


class Registry:
    """A registry's referrers for checks.signatures: manifest digest → [(kind, artifact type, text)
    or (kind, artifact type, text, what the referrers index says its type is)]: the index is written
    by whoever can push, the referrer's own manifest is content-addressed."""

    def __init__(self, manifests, referrers):
        self.manifests, self.held = manifests, referrers


@pytest.fixture
def fake_registry(monkeypatch):
    def manifest_of(remote, repository, reference):
        document = remote.manifests.get(reference)
        return None if document is None else (attestations.Subject("m", DIGEST, 1), document)  # tag "1" → DIGEST

    def referrers(remote, repository, digest):
        return [{"digest": f"{digest}/{i}", "artifactType": (held[3] if len(held) > 3 else held[1]),
                 "annotations": {attestations.KIND_ANNOTATION: held[0]}}
                for i, held in enumerate(remote.held.get(digest, []))]

    def read_referrer(remote, repository, digest):
        manifest, index = digest.rsplit("/", 1)
        _, artifact_type, text, *_ = remote.held[manifest][int(index)]
        if text is None:  # an index among the referrers
            return attestations.Referrer(digest, frozenset({artifact_type} - {""}), None,
                                         unread="it is an index, whose manifests are not read")
        layers = [t if isinstance(t, bytes) else t.encode() for t in (text if isinstance(text, tuple) else (text,))]
        if sum(map(len, layers)) > attestations.MAX_DOCUMENT:
            return attestations.Referrer(digest, frozenset({artifact_type} - {""}), None, unread="its layers are over 64 MiB")
        return attestations.Referrer(digest, frozenset({artifact_type} - {""}), layers[0], tuple(layers[1:]))

    monkeypatch.setattr(attestations, "manifest_of", manifest_of)
    monkeypatch.setattr(attestations, "referrers", referrers)
    monkeypatch.setattr(attestations, "read_referrer", read_referrer)


def held_for(signer, digest, spdx, *, statements=None, leave_out=()):
    made = signing.statements("reg.example/x", digest, {"spdx": json.dumps(spdx)})
    made.update(statements or {})
    return [("spdx", "application/spdx+json", json.dumps(spdx)),
            *((f"signature-{kind}", signing.BUNDLE_TYPE, signer.bundle(statement))
              for kind, statement in made.items() if kind not in leave_out)]


SPDX = {"relationships": [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                           "relatedSpdxElement": "SPDXRef-image"}],
        "packages": [{"SPDXID": "SPDXRef-image", "checksums": [{"algorithm": "SHA256", "checksumValue": "cd" * 32}]}]}


@pytest.mark.parametrize(("change", "says"), [
    ({}, ""),
    ({"leave_out": ("image",)}, "signature of the manifest: missing: no bundle signs it"),
    ({"statements": {"spdx": signing.statement("x", "sha256:" + "ef" * 32, signing.PREDICATE_TYPES["spdx"], SPDX)}},
     "is about " + "ef" * 32 + ", not this manifest"),
    ({"statements": {"spdx": signing.statement("x", DIGEST, signing.PREDICATE_TYPES["spdx"], {**SPDX, "name": "x"})}},
     "signs another SPDX SBOM than the one beside the image"),
    ({"statements": {"image": signing.statement("x", DIGEST, "https://example.com/other", {})}},
     "signs a 'https://example.com/other' predicate"),
    ({"spdx": {**SPDX, "packages": [{"SPDXID": "SPDXRef-image",
                                     "checksums": [{"algorithm": "SHA256", "checksumValue": "00" * 32}]}]}},
     "signs a SPDX SBOM of another image than this manifest"),
])
def test_verify_signatures_holds_each_bundle_to_the_manifest_it_hangs_off(keys, fake_registry, change, says):
    signer = signing.Signer(keys["ec"][0])
    spdx = change.pop("spdx", SPDX)
    manifest = {"config": {"digest": "sha256:" + "cd" * 32}, "layers": []}
    remote = Registry({"1": manifest}, {DIGEST: held_for(signer, DIGEST, spdx, **change)})
    found = signatures.check(remote, "reg.example/x:1", signing.read_public_key(keys["ec"][1]), ["image", "spdx"])
    failed = [f"{row.what}: {row.detail}" for row in found if not row.ok]
    assert (failed == []) if not says else (says in failed[0]), failed
    if not says:
        assert [row.what.split(" (")[0] for row in found] == [
            "signature of the manifest", "signature of the SPDX SBOM", f"SPDX SBOM {DIGEST[:19]}"]


UNSIGNED = {**SPDX, "name": "the attacker's"}  # an SBOM of this very image that no signature covers


@pytest.mark.parametrize(("held", "require", "says"), [
    # an unsigned SPDX document first, last, or alone: wherever it stands, it fails, named by its digest
    (lambda ok: [("spdx", "application/spdx+json", json.dumps(UNSIGNED)), *ok], ["image", "spdx"],
     ["SPDX SBOM " + DIGEST[:19] + ": no signature of the key covers it"]),
    (lambda ok: [*ok, ("spdx", "application/spdx+json", json.dumps(UNSIGNED))], ["image", "spdx"],
     ["SPDX SBOM " + DIGEST[:19] + ": no signature of the key covers it"]),
    (lambda ok: [ok[1], ("spdx", "application/spdx+json", json.dumps(UNSIGNED))], ["image", "spdx"],
     ["SPDX SBOM " + DIGEST[:19] + ": no signature of the key covers it",
      "SPDX SBOM: missing: required ([verify] require)"]),
    # stripped to the image's own signature: each required piece is missing
    (lambda ok: [ok[1]], ["image", "spdx", "provenance"],
     ["SPDX SBOM: missing: required", "provenance: missing: required"]),
    # an SBOM of a type torchbake does not write, annotated as something harmless
    (lambda ok: [*ok, ("note", "application/vnd.cyclonedx+xml", "<bom/>")], ["image", "spdx"],
     ["SBOM " + DIGEST[:19] + ": an SBOM or provenance of a type torchbake does not read"]),
    # an SPDX document that calls itself CycloneDX in its annotation is still judged as SPDX
    (lambda ok: [("cyclonedx", "application/spdx+json", json.dumps(UNSIGNED)), *ok], ["image", "spdx"],
     ["SPDX SBOM " + DIGEST[:19] + ": no signature of the key covers it"]),
    # other artifacts are listed, not judged; what is required may be less
    (lambda ok: [*ok, ("", "application/vnd.example.notes", "hello")], ["image", "spdx"], []),
    (lambda ok: [ok[1]], ["image"], []),
])
def test_verify_signatures_decides_on_the_whole_set_of_referrers_in_any_order(keys, fake_registry, held, require, says):
    signer = signing.Signer(keys["ec"][0])
    manifest = {"config": {"digest": "sha256:" + "cd" * 32}, "layers": []}
    remote = Registry({"1": manifest}, {DIGEST: held(held_for(signer, DIGEST, SPDX))})
    found = signatures.check(remote, "reg.example/x:1", signing.read_public_key(keys["ec"][1]), require)
    failed = [f"{row.what}: {row.detail}" for row in signatures.failed(found)]
    assert len(failed) == len(says) and all(want in got for want, got in zip(says, failed, strict=True)), failed


def test_a_signed_payload_that_is_no_statement_does_not_hold(keys):
    """A bundle the key really signed, whose payload is not an in-toto statement, is refused as such."""
    signer = signing.Signer(keys["ec"][0])
    bundle = json.loads(signer.bundle(signing.statement("x", DIGEST, signing.IMAGE_PREDICATE, {})))
    from securesystemslib.dsse import Envelope

    for payload in (b"not json", b"[1, 2]"):
        envelope = Envelope(payload, signing.PAYLOAD_TYPE, {})
        signature = envelope.sign(signer._signer)
        bundle["dsseEnvelope"] = {"payload": base64.b64encode(payload).decode(), "payloadType": signing.PAYLOAD_TYPE,
                                  "signatures": [{"sig": base64.b64encode(bytes.fromhex(signature.signature)).decode()}]}
        with pytest.raises(SignatureError, match="not an in-toto statement"):
            signing.open_bundle(json.dumps(bundle), signing.read_public_key(keys["ec"][1]))


PROVENANCE = {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "x", "digest": {"sha256": "cd" * 32}}],
              "predicateType": "https://slsa.dev/provenance/v1", "predicate": {"buildDefinition": {"buildType": "t"}}}


def _verdict(keys, held, require=("image", "spdx")):
    manifest = {"config": {"digest": "sha256:" + "cd" * 32}, "layers": []}
    remote = Registry({"1": manifest}, {DIGEST: held})
    found = signatures.check(remote, "reg.example/x:1", signing.read_public_key(keys["ec"][1]), list(require))
    return [f"{row.what}: {row.detail}" for row in signatures.failed(found)]


@pytest.mark.parametrize(("relabel", "says"), [
    # the referrers index (anyone who can push writes it) relabels the unsigned SBOM or drops its type
    (lambda item: (*item, "application/vnd.example.notes"), "SPDX SBOM " + DIGEST[:19] + ": no signature of the key"),
    (lambda item: (*item, ""), "SPDX SBOM " + DIGEST[:19] + ": no signature of the key"),
    # its own manifest calls it something else: its content says what it is
    (lambda item: (item[0], "application/octet-stream", item[2]), "SPDX SBOM " + DIGEST[:19] + ": no signature"),
    (lambda item: (item[0], "", item[2]), "SPDX SBOM " + DIGEST[:19] + ": no signature"),
    # a CycloneDX document under a type torchbake does not know
    (lambda item: (item[0], "application/x-notes", json.dumps({"bomFormat": "CycloneDX", "components": []})),
     "CycloneDX SBOM " + DIGEST[:19] + ": no signature"),
])
def test_an_unsigned_sbom_fails_whatever_the_referrers_index_or_its_type_calls_it(keys, fake_registry, relabel, says):
    signer = signing.Signer(keys["ec"][0])
    unsigned = ("spdx", "application/spdx+json", json.dumps({**UNSIGNED, "spdxVersion": "SPDX-2.3"}))
    failed = _verdict(keys, [*held_for(signer, DIGEST, SPDX), relabel(unsigned)])
    assert len(failed) == 1 and failed[0].startswith(says), failed


def _with_provenance(signer, document, signed=PROVENANCE):
    statements = signing.statements("reg.example/x", DIGEST, {"provenance": json.dumps(signed)})
    return [*held_for(signer, DIGEST, SPDX), ("provenance", "application/vnd.in-toto+json", json.dumps(document)),
            ("signature-provenance", signing.BUNDLE_TYPE, signer.bundle(statements["provenance"]))]


@pytest.mark.parametrize(("document", "says"), [
    (PROVENANCE, None),
    ({**PROVENANCE, "subject": [{"name": "x", "digest": {"sha256": "ef" * 32}}]}, "of another image than this manifest"),
    ({**PROVENANCE, "subject": [*PROVENANCE["subject"], {"name": "y", "digest": {"sha256": "ef" * 32}}]},
     "signs another provenance than the one beside"),
    ({**PROVENANCE, "builtBy": "someone else"}, "signs another provenance than the one beside"),  # a field not signed
    ({**PROVENANCE, "predicateType": "https://example.com/other"}, "signs another provenance than the one beside"),
    ({**PROVENANCE, "_type": "https://example.com/statement"}, "signs another provenance than the one beside"),
])
def test_a_provenance_is_covered_only_when_every_signed_field_is_the_same(keys, fake_registry, document, says):
    """The subject (the image it describes), the statement's and the predicate's types are
    compared with what was signed, not only the predicate."""
    failed = _verdict(keys, _with_provenance(signing.Signer(keys["ec"][0]), document), ("image", "spdx", "provenance"))
    if says is None:
        assert failed == []
    else:
        assert any(says in row for row in failed) and any(row.startswith("provenance") for row in failed), failed


def test_a_second_provenance_of_the_signed_predicate_about_another_image_is_not_covered(keys, fake_registry):
    """The signed predicate copied into a provenance of another subject, listed after the real one:
    the real one is covered, the copy is not (each document is held to the image, not the first)."""
    signer = signing.Signer(keys["ec"][0])
    forged = {**PROVENANCE, "subject": [{"name": "evil.example/other", "digest": {"sha256": "ef" * 32}}]}
    held = [*_with_provenance(signer, PROVENANCE), ("provenance", "application/vnd.in-toto+json", json.dumps(forged))]
    failed = _verdict(keys, held, ("image", "spdx", "provenance"))
    assert failed == [f"provenance {DIGEST[:19]}: no signature of the key covers it: whoever pushed it, it is not the"
                      " signer's"], failed


@pytest.mark.parametrize("require", [["spdx"], []])
def test_the_manifest_s_own_signature_is_required_whatever_require_lists(keys, fake_registry, require):
    signer = signing.Signer(keys["ec"][0])
    failed = _verdict(keys, held_for(signer, DIGEST, SPDX, leave_out=("image",)), require)
    assert failed == ["signature of the manifest: missing: no bundle signs it"]


@pytest.mark.parametrize(("hostile", "says"), [
    ((signing.BUNDLE_TYPE, b"[" * 100_000 + b"]" * 100_000), "is not a Sigstore bundle: it nests deeper than 64 levels"),
    ((signing.BUNDLE_TYPE, json.dumps({"dsseEnvelope": {"x": [[[[[[[[]]]]]]]]}} | {"deep": eval("[" * 70 + "]" * 70)})),
     "is not a Sigstore bundle: it nests deeper than 64 levels"),
    ((signing.BUNDLE_TYPE, b"\xff\xfe not text"), "the bundle is not a Sigstore bundle: it is not UTF-8 text"),
    (("application/spdx+json", b"{" + b'"a":{' * 50_000 + b"}" * 50_001), "SPDX SBOM"),
    (("application/vnd.example.big", b"x" * (attestations.MAX_DOCUMENT + 1)), "not read (its layers are over 64 MiB)"),
    (("application/vnd.example.index", None), "not read (it is an index, whose manifests are not read)"),
    # an SBOM in a second layer, or gzipped under a type that says nothing
    (("application/vnd.example.notes", ("{}", json.dumps(UNSIGNED | {"spdxVersion": "SPDX-2.3"}))),
     "SBOM " + DIGEST[:19] + ": an SBOM or provenance of a type torchbake does not read"),
    (("application/octet-stream", gzip.compress(json.dumps(UNSIGNED | {"spdxVersion": "SPDX-2.3"}).encode())),
     "SPDX SBOM " + DIGEST[:19] + ": no signature of the key covers it"),
])
def test_hostile_referrers_are_a_failing_row_not_a_traceback(keys, fake_registry, hostile, says):
    signer = signing.Signer(keys["ec"][0])
    failed = _verdict(keys, [*held_for(signer, DIGEST, SPDX), ("x", *hostile)])
    assert len(failed) == 1 and says in failed[0], failed


@pytest.mark.parametrize("where", ["file", "environment"])
def test_an_empty_require_is_a_configuration_error_naming_where_it_came_from(keys, tmp_path, where):
    """`[verify] require = []` or an empty TORCHBAKE_VERIFY_REQUIRE (an unset CI variable) would
    require nothing: refused (exit 2), its source named, before the registry is asked."""
    from tests.conftest import run_invoke

    config = tmp_path / "empty.toml"
    config.write_text("[verify]\nrequire = []\n")
    args = ("--config", str(config)) if where == "file" else ()
    env = {"TORCHBAKE_VERIFY_REQUIRE": ""} if where == "environment" else {}
    result = run_invoke("verify", "reg.example/x:1", "--signatures", "--key", str(keys["ec"][1]), *args, env=env)
    source = f"from {config}" if where == "file" else "from environment TORCHBAKE_VERIFY_REQUIRE"
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"verify.require = [] ({source}) is invalid: it is empty" in result.stderr, result.stderr


def _dev_plan(**given):
    """A dev plan's FROM images as :class:`torchbake.variants.dev.DevPlan` tells them."""
    from torchbake.variants.dev import DevPlan

    plan = types.SimpleNamespace(base_image="reg.example/team/base:1", slim=True, runtime_base="", download_options=None,
                                 verify_options=types.SimpleNamespace(base_key="", require=["spdx"]))
    vars(plan).update(given)
    plan.from_images = lambda labels=None: DevPlan.from_images(plan, labels)
    return plan


@pytest.mark.parametrize(("given", "labels", "expected"), [
    ({}, {"org.opencontainers.image.base.name": "reg.example/os:12"}, ["reg.example/team/base:1", "reg.example/os:12"]),
    ({"runtime_base": "reg.example/slim:1"}, {}, ["reg.example/team/base:1", "reg.example/slim:1"]),
    ({"slim": False, "runtime_base": "reg.example/slim:1"}, {}, ["reg.example/team/base:1"]),
])
def test_every_from_image_of_a_build_is_proven_the_slim_stage_s_included(keys, monkeypatch, given, labels, expected):
    """[verify] base_key holds every FROM image to the key, the slim stage's too; a dry run gives the
    build's verdict on the engine's copies (another digest: exit 11 before any work)."""
    from torchbake.adapters import registry
    from torchbake.building import base_policy

    plan = _dev_plan(**given)
    plan.verify_options.base_key = str(keys["ec"][1])
    asked = []
    monkeypatch.setattr(registry, "for_host", lambda host, info, policy: host)
    monkeypatch.setattr(base_policy.DownloadPolicy, "from_settings", lambda options: None)
    monkeypatch.setattr(attestations, "manifest_of",
                        lambda remote, repository, tag: (attestations.Subject("m", f"sha256:{len(repository):064x}", 1), {}))
    monkeypatch.setattr(signatures, "check", lambda remote, image, key, require: asked.append((image, require)) or [])
    client = types.SimpleNamespace(engine_info=lambda: {}, inspect_image=lambda reference: None)
    verified, vouched = base_policy.check_registry(plan, client, labels)
    assert list(verified) == expected and [image.split("@")[0] for image, _ in asked] == [
        "/".join(registry.split_reference(e)[:2]) for e in expected]
    assert vouched.endswith("(image, spdx)")
    assert len(base_policy.check_engine_copy(plan, client, verified)) == len(expected)  # a dry run: none held yet
    built = types.SimpleNamespace(base_digest=verified[expected[0]])  # a build: the engine holds the base by then
    if len(expected) > 1:  # and the slim stage's FROM image must be the engine's, verified
        with pytest.raises(SignatureError, match="does not hold reg.example/.*, the slim stage's FROM image"):
            base_policy.check_engine_copy(plan, client, verified, built)
    else:
        assert base_policy.check_engine_copy(plan, client, verified, built) == []
    held = {reference: {"RepoDigests": [f"{reference.rsplit(':', 1)[0]}@{digest}"]} for reference, digest in verified.items()}
    assert base_policy.check_engine_copy(plan, client := types.SimpleNamespace(inspect_image=held.get), verified) == []
    held[expected[-1]] = {"RepoDigests": [f"{expected[-1].rsplit(':', 1)[0]}@sha256:{'0' * 64}"]}  # made here
    with pytest.raises(SignatureError, match=f"the engine's {re.escape(expected[-1])} is sha256:0000"):
        base_policy.check_engine_copy(plan, client, verified)


def test_a_bundle_that_is_not_utf8_text_is_a_signature_error_naming_it(keys):
    """A bundle's bytes, as a registry serves them, are opened; bytes that are not UTF-8 are a
    SignatureError (exit 11) that says so, not a RegistryError (exit 10) nor a traceback."""
    key = signing.read_public_key(keys["ec"][1])
    bundle = signing.Signer(keys["ec"][0]).bundle(signing.statement("x", DIGEST, signing.IMAGE_PREDICATE, {}))
    assert key.open(bundle.encode())["predicateType"] == signing.IMAGE_PREDICATE
    for broken in (b"\xff\xfe{}", bundle.encode().replace(b"{", b"\xc3{", 1)):
        with pytest.raises(SignatureError, match="^is not a Sigstore bundle: it is not UTF-8 text$") as refused:
            key.open(broken)
        assert refused.value.exit_code == 11


@pytest.mark.parametrize(("document", "deep"), [
    ("[" * 100_000, True), ("[" * 100_000 + "]" * 100_000, True), ('{"a":' * 65 + "1" + "}" * 65, True),
    ("[" * 65 + "]" * 65, True), ("[" * 64 + "]" * 64, False), ('["' + "[" * 100 + '", {"a": "\\"[["}]', False),
])
def test_json_from_a_registry_is_bounded_in_depth_and_never_a_traceback(keys, document, deep):
    """'[' * 100000 was a RecursionError's traceback; 64 levels is the bound (brackets inside a
    string are text)."""
    if not deep:
        assert signing.load_json_bounded(document, "a document") is not None
        return
    with pytest.raises(SignatureError, match="^is not a Sigstore bundle: it nests deeper than 64 levels$"):
        signing.open_bundle(document, signing.read_public_key(keys["ec"][1]))
    with pytest.raises(SignatureError, match="^is not a document: it nests deeper than 64 levels$"):
        signing.load_json_bounded(document.encode(), "a document")


def test_a_bundle_over_the_size_bound_and_a_signed_payload_too_deep_are_refused(keys):
    with pytest.raises(SignatureError, match=r"^is not a Sigstore bundle: it is over 64 MiB \(67,108,865 bytes\)$"):
        signing.load_json_bounded(b" " * (signing.MAX_BUNDLE + 1), "a Sigstore bundle")
    signer = signing.Signer(keys["ec"][0])
    from securesystemslib.dsse import Envelope

    payload = b"[" * 5_000 + b"]" * 5_000  # signed by the key itself: still a bounded parse
    signature = Envelope(payload, signing.PAYLOAD_TYPE, {}).sign(signer._signer)
    bundle = json.loads(signer.bundle(signing.statement("x", DIGEST, signing.IMAGE_PREDICATE, {})))
    bundle["dsseEnvelope"] = {"payload": base64.b64encode(payload).decode(), "payloadType": signing.PAYLOAD_TYPE,
                              "signatures": [{"sig": base64.b64encode(bytes.fromhex(signature.signature)).decode()}]}
    with pytest.raises(SignatureError, match="^signs something that is not an in-toto statement: it nests deeper"):
        signing.open_bundle(json.dumps(bundle), signing.read_public_key(keys["ec"][1]))
    for envelope in ({"payload": "", "signatures": 5}, {"payload": "", "signatures": [], "payloadType": 5}, []):
        with pytest.raises(SignatureError, match="is not a Sigstore bundle with a DSSE envelope"):
            signing.open_bundle(json.dumps({**bundle, "dsseEnvelope": envelope}), signing.read_public_key(keys["ec"][1]))


@pytest.mark.parametrize(("kind", "says"), [
    ("ec", r"is a private key; give its public key \(PEM\) to verify: `openssl pkey -in KEY.pem -pubout"),
    ("locked", r"is a private key; give its public key \(PEM\) to verify"),  # encrypted: refused, never opened
    ("rsa-pub", r"is an RSA key \(2048 bits\), which is not supported here: torchbake verifies ECDSA P-256 or Ed25519"),
    ("p384-pub", "is an ECDSA key on the curve secp384r1, which is not supported here: torchbake verifies ECDSA P-256"),
])
def test_a_verification_key_must_be_a_public_key_torchbake_verifies_with(keys, kind, says):
    name, half = kind.removesuffix("-pub"), 1 if kind.endswith("-pub") else 0
    path = keys[name][half]
    with pytest.raises(ConfigurationError, match=f"^--base-key {re.escape(str(path))} {says}") as refused:
        signing.read_public_key(path, where="--base-key")
    assert refused.value.exit_code == 2 and "PRIVATE KEY" not in str(refused.value)
    assert signing.read_public_key(keys["ed"][1]).hint and signing.read_public_key(keys["ec"][1]).hint


@pytest.mark.parametrize("kind", ["ec", "rsa-pub"])
def test_verify_refuses_a_private_or_rsa_key_before_asking_the_registry(keys, kind):
    from tests.conftest import run_invoke

    path = keys[kind.removesuffix("-pub")][1 if kind.endswith("-pub") else 0]
    result = run_invoke("verify", "reg.example/x:1", "--signatures", "--key", str(path), "--docker", "/no/such/docker")
    assert result.returncode == 2, result.stdout + result.stderr
    says = "is a private key; give its public key (PEM)" if kind == "ec" else "is an RSA key (2048 bits), which is not"
    assert f"--key {path} {says}" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_the_ci_identity_is_asked_for_afresh_at_each_signature_as_github_actions_gives_it(monkeypatch):
    """[sign] ci_identity against GitHub Actions' id-token exchange as GitHub documents it (a local
    server in its place): GET ACTIONS_ID_TOKEN_REQUEST_URL with audience=sigstore and the request
    token as a bearer, answered {"value": JWT}. The token lives 5 minutes, so each signature asks
    again; a job without the permission is told what it lacks (exit 2)."""
    import http.server

    from tests.support import serving

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            seen.append((self.path, self.headers.get("Authorization")))
            body = json.dumps({"count": 1, "value": oidc_token(300)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    for name in ("ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "GITHUB_ACTIONS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match=r"\[sign\] ci_identity: this job has no ambient OIDC identity"):
        signing.KeylessSigner(ci_identity=True)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    with serving(httpd):
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", f"http://127.0.0.1:{httpd.server_address[1]}/token?api-version=2.0")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "request-token-7")
        signer = signing.KeylessSigner(ci_identity=True)
        assert signer.signer == "repo:team/images (https://token.actions.githubusercontent.com)"
        signer._identity()  # what bundle() does before each signature
    assert len(seen) == 2 and all("audience=sigstore" in path and auth == "bearer request-token-7" for path, auth in seen), seen
