"""Signatures a consumer can check with only the registry and the public key: each pushed manifest
(a platform's image, an index) signed, and each of its attestations (SPDX, CycloneDX, provenance)
signed as an in-toto Statement whose subject is that manifest. Each signature is a Sigstore bundle
v0.3 holding a DSSE envelope, stored as an OCI referrer of the manifest it covers, as cosign v3
stores them; sigstore-js (``@sigstore/verify``) verifies such a bundle offline with the public key.

The cryptography is the libraries': the key read by ``cryptography``, the DSSE envelope signed and
checked by ``securesystemslib``, the bundle written and read by the Sigstore protobuf models. The
private key and its password stay in this process: nothing torchbake prints or writes holds them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbake.core import redaction
from torchbake.core.errors import ConfigurationError, RegistryError, SignatureError, clipped
from torchbake.supply_chain import sbom_formats

BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
IMAGE_PREDICATE = "https://sigstore.dev/cosign/sign/v1"  # the image's own signature, as cosign v3 writes it
PREDICATE_TYPES = {**{f.name: f.predicate_type for f in sbom_formats.TABLE}, "provenance": "https://slsa.dev/provenance/v1"}
PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"
KEY_TYPES = "ECDSA P-256 or Ed25519"
# What a document read from a registry may be: as large as the largest referrer torchbake reads (an
# SBOM's bundle carries the SBOM's whole statement, so a few MiB would refuse a large image's), as
# deep as no document torchbake writes or reads comes near (a dozen levels); deeper is hostile.
MAX_BUNDLE = 64 * 2**20
MAX_DEPTH = 64
MAX_SIGNATURES = 16  # a DSSE envelope's: each is a signature check
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, escapes and all
_NOT_BRACKET = bytes(code for code in range(256) if code not in b"[]{}")


def load_json_bounded(data: str | bytes, what: str, *, limit: int = MAX_BUNDLE, depth: int = MAX_DEPTH) -> Any:
    """``data`` (JSON, as text or UTF-8 bytes, from anyone who can push) parsed; a document that is
    not UTF-8, is over ``limit`` bytes, nests deeper than ``depth`` levels or is not JSON is a
    :class:`SignatureError` that says it "is not ``what``" and why, never a RecursionError (the
    parser stops at the interpreter's recursion limit, about 1,000 levels, and says so; the
    brackets outside its strings are counted for the rest)."""
    if len(data) > limit:
        raise SignatureError(f"is not {what}: it is over {limit // 2**20} MiB ({len(data):,} bytes)")
    if isinstance(data, bytes | bytearray):
        try:
            data = bytes(data).decode()
        except UnicodeDecodeError:
            raise SignatureError(f"is not {what}: it is not UTF-8 text") from None
    deep = SignatureError(f"is not {what}: it nests deeper than {depth} levels")
    try:
        document = json.loads(data)
    except RecursionError:
        raise deep from None
    except ValueError as exc:
        raise SignatureError(f"is not {what}: it is not JSON ({getattr(exc, 'msg', exc)})") from None
    if _nesting(data, depth) > depth:
        raise deep
    return document


def _nesting(text: str, most: int) -> int:
    """How deep the arrays and objects of ``text`` (JSON the parser took) nest, ``most`` + 1 for
    any deeper, counted without recursion and at the speed of bytes.replace: the brackets outside its
    strings, each pass taking out the innermost pairs."""
    brackets = _STRING.sub("", text).encode(errors="replace").translate(None, _NOT_BRACKET)
    brackets = brackets.replace(b"{", b"[").replace(b"}", b"]")  # the parser took it: each pair matches
    for level in range(most + 1):
        if not brackets:
            return level
        brackets = brackets.replace(b"[]", b"")
    return most + 1


def _signs_with(key) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    return isinstance(key, ed25519.Ed25519PrivateKey) or (isinstance(key, ec.EllipticCurvePrivateKey)
                                                          and isinstance(key.curve, ec.SECP256R1))


def _verifies_with(key) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    return isinstance(key, ed25519.Ed25519PublicKey) or (isinstance(key, ec.EllipticCurvePublicKey)
                                                         and isinstance(key.curve, ec.SECP256R1))


def _key_kind(key) -> str:
    """What a private or public key is, in words ("an RSA key (3072 bits)")."""
    from cryptography.hazmat.primitives.asymmetric import dh, dsa, ec, ed448, rsa, x448, x25519

    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return f"an RSA key ({key.key_size} bits)"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return f"an ECDSA key on the curve {key.curve.name}"
    if isinstance(key, dsa.DSAPrivateKey | dsa.DSAPublicKey):
        return "a DSA key"
    if isinstance(key, ed448.Ed448PrivateKey | ed448.Ed448PublicKey):
        return "an Ed448 key"
    if isinstance(key, x25519.X25519PublicKey | x448.X448PublicKey | dh.DHPublicKey):
        return "a key-agreement key (X25519, X448 or Diffie-Hellman), which signs nothing"
    return f"a {type(key).__name__} key"


@dataclass(frozen=True)
class PublicKey:
    """A public key to check signatures with, and the hint its bundles name it by."""

    pem: bytes
    hint: str  # base64 of the SHA-256 of its SubjectPublicKeyInfo, as cosign names a key

    @property
    def signer(self) -> str:
        return self.hint

    def open(self, text: str | bytes) -> dict[str, Any]:
        return open_bundle(text, self)


@dataclass(frozen=True)
class Identity:
    """Whom keyless signatures must name ([sign] identity_token_file's signer): the identity in
    the Fulcio certificate (an e-mail, a CI workflow's URI) and the OIDC issuer that vouched for it.
    Checked by sigstore-python against Sigstore's public trust root (which it fetches: TUF)."""

    identity: str
    issuer: str

    @property
    def signer(self) -> str:
        return f"{self.identity} ({self.issuer})"

    def open(self, text: str | bytes) -> dict[str, Any]:
        """The statement a keyless bundle signs, once sigstore-python verified it: the certificate
        chains to Fulcio, names this identity and issuer, and the signature is in Rekor."""
        sigstore = _sigstore()
        from sigstore.errors import Error as SigstoreError
        from sigstore.verify import policy

        load_json_bounded(text, "a Sigstore bundle")  # UTF-8, bounded, JSON: before sigstore-python parses it
        text = text.decode() if isinstance(text, bytes | bytearray) else text
        try:
            bundle = sigstore.models.Bundle.from_json(text)
        except (SigstoreError, ValueError, TypeError) as exc:
            reason = (str(exc).splitlines() or [""])[0]  # pydantic's first line; the rest is its help
            raise SignatureError(f"is not a keyless Sigstore bundle with a certificate and a log entry ({reason})"
                                 ) from None
        try:
            verifier = _production_verifier()
        except SigstoreError as exc:
            raise RegistryError(f"Sigstore's public trust root did not answer ({exc}); keyless signatures are checked"
                                " against it.") from None
        try:
            payload_type, payload = verifier.verify_dsse(bundle, policy.Identity(identity=self.identity,
                                                                                 issuer=self.issuer))
        except SigstoreError as exc:
            raise SignatureError(f"does not hold for {self.signer}: {exc}") from None
        return _statement(payload_type, payload)


@functools.cache
def _production_verifier():
    """sigstore-python's verifier of Sigstore's public instance: its trust root fetched once a run."""
    from sigstore.verify import Verifier

    return Verifier.production()


def _statement(payload_type: str, payload: bytes) -> dict[str, Any]:
    """The in-toto statement a verified envelope carries."""
    if payload_type != PAYLOAD_TYPE:
        raise SignatureError(f"signs a {clipped(payload_type, quoted=True)}, not an in-toto statement")
    try:
        statement = load_json_bounded(payload, "an in-toto statement")
    except SignatureError as exc:
        raise SignatureError(f"signs something that {exc}") from None
    if not isinstance(statement, dict):
        raise SignatureError("signs something that is not an in-toto statement")
    return statement


def _sigstore():
    """sigstore-python (the ``keyless`` extra), or a clear refusal (exit 2)."""
    try:
        import sigstore.models
        import sigstore.oidc
        import sigstore.sign
    except ImportError:
        raise ConfigurationError("Keyless signing uses sigstore-python, which is not installed: pip install"
                                 " 'torchbake[keyless]'.") from None
    return sigstore


class KeylessSigner:
    """Keyless signing through Sigstore's public instance, by sigstore-python: the OIDC identity
    token of [sign] identity_token_file (a CI job's, e.g. GitHub Actions' ``id-token``) buys a
    short-lived Fulcio certificate naming that identity; each signature is logged in Rekor, and the
    bundle carries the certificate instead of a key hint. The token is a secret: printed nowhere."""

    def __init__(self, token_file: str | Path = "", *, ci_identity: bool = False):
        self._where = f"[sign] identity_token_file {token_file}" if token_file else "[sign] ci_identity"
        self._token_file, self._ci_identity = token_file, ci_identity
        self._token = self._identity()
        self.signer = f"{self._token.identity} ({self._token.issuer})"
        self._context = None

    def _identity(self):
        """The OIDC identity token: [sign] identity_token_file's, or (``ci_identity``) the CI job's own,
        asked for afresh (GitHub Actions' id-token lives 5 minutes; a night signs hours after it
        starts), by sigstore-python's detection of the CI's ambient credential."""
        sigstore = _sigstore()
        if self._ci_identity:
            try:
                raw = sigstore.oidc.detect_credential() or ""
            except sigstore.oidc.IdentityError as exc:
                raise ConfigurationError(f"{self._where}: the CI job gave no identity token ({exc}).") from None
            if not raw:
                raise ConfigurationError(f"{self._where}: this job has no ambient OIDC identity (GitHub Actions gives one"
                                         " to a job whose permissions include id-token: write).")
        else:
            try:
                raw = Path(self._token_file).read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigurationError(f"{self._where} cannot be read ({getattr(exc, 'strerror', None) or exc}).") from None
        if raw:
            redaction.register(raw)
        try:
            return sigstore.oidc.IdentityToken(raw)
        except sigstore.oidc.IdentityError as exc:
            raise ConfigurationError(f"{self._where} holds no usable OIDC identity token ({exc}): give a fresh token whose"
                                     " audience is 'sigstore' (a CI job's id-token), or sign with [sign] key.") from None

    def ready(self) -> None:
        """Sigstore's trust root and services found (before any build: a push that cannot be
        signed is refused first, exit 10)."""
        if self._context is None:
            sigstore = _sigstore()
            from sigstore.errors import Error as SigstoreError

            try:
                self._context = sigstore.sign.SigningContext.from_trust_config(
                    sigstore.models.ClientTrustConfig.production())
            except SigstoreError as exc:
                raise RegistryError(f"Keyless signing needs Sigstore's public instance (its TUF trust root, Fulcio,"
                                    f" Rekor), which did not answer ({exc}); nothing was built or pushed. Run where"
                                    " it answers, or sign with a key ([sign] key).") from None

    def bundle(self, statement: Mapping[str, Any]) -> str:
        """The Sigstore bundle v0.3 (JSON) of a DSSE envelope of ``statement``, signed keylessly."""
        self.ready()
        from sigstore.dsse import Statement
        from sigstore.errors import Error as SigstoreError

        if self._ci_identity:
            self._token = self._identity()
        try:
            with self._context.signer(self._token) as signer:
                return signer.sign_dsse(Statement(json.dumps(statement, sort_keys=True, separators=(",", ":"))
                                                  .encode())).to_json()
        except SigstoreError as exc:
            raise RegistryError(f"Sigstore refused to sign for {self.signer} ({exc}).") from None


class Signer:
    """A private key read from a PEM file ([sign] key), its password from a file ([sign]
    password_file) when it is encrypted."""

    def __init__(self, key_file: str | Path, password_file: str | Path | None = None):
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
        from securesystemslib.signer import CryptoSigner

        where = f"[sign] key {key_file}"
        try:
            data = Path(key_file).read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"{where} cannot be read ({exc.strerror}). Give a PEM private key file"
                                     f" ({KEY_TYPES}).") from None
        password = None
        if password_file:
            try:
                password = Path(password_file).read_bytes().splitlines()[0] if Path(password_file).stat().st_size else b""
            except OSError as exc:
                raise ConfigurationError(f"[sign] password_file {password_file} cannot be read ({exc.strerror}).") from None
        if password_file and not password:
            raise ConfigurationError(f"[sign] password_file {password_file} is empty; its first line is the key's password.")
        if password:
            redaction.register(password.decode(errors="replace"))  # printed nowhere, whatever fails later
        try:
            key = load_pem_private_key(data, password or None)
        except TypeError:  # encrypted without a password, or a password for a key that has none
            raise ConfigurationError(
                f"{where} is encrypted and no password was given: set [sign] password_file (TORCHBAKE_SIGN_PASSWORD_FILE)"
                if password is None else f"{where} is not encrypted: leave [sign] password_file unset.") from None
        except ValueError:
            raise ConfigurationError(f"{where} is not a PEM private key ({KEY_TYPES})" + (
                ", or not one this password opens." if password else ".")) from None
        if not _signs_with(key):
            raise ConfigurationError(f"{where} is {_key_kind(key)}; torchbake signs with {KEY_TYPES} keys.")
        self._signer = CryptoSigner(key)
        self.public_key = public_key_of(key.public_key())
        self.signer = self.public_key.hint

    def ready(self) -> None:
        """Nothing to reach: the key signs here."""

    def bundle(self, statement: Mapping[str, Any]) -> str:
        """The Sigstore bundle v0.3 (JSON) of a DSSE envelope of ``statement``, signed."""
        from securesystemslib.dsse import Envelope

        Bundle, VerificationMaterial, PublicKeyIdentifier, BundleEnvelope, Signature = _bundle_models()
        envelope = Envelope(json.dumps(statement, sort_keys=True, separators=(",", ":")).encode(), PAYLOAD_TYPE, {})
        signature = envelope.sign(self._signer)
        return Bundle(
            media_type=BUNDLE_TYPE,
            verification_material=VerificationMaterial(public_key=PublicKeyIdentifier(hint=self.public_key.hint)),
            dsse_envelope=BundleEnvelope(payload=envelope.payload, payload_type=PAYLOAD_TYPE,
                                         signatures=[Signature(sig=bytes.fromhex(signature.signature), keyid="")]),
        ).to_json()


def _bundle_models():
    """The Sigstore bundle's protobuf models (sigstore-protobuf-specs), imported without the
    deprecation warning their pydantic validators raise on pydantic >= 2.12: nothing the user
    can act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sigstore_protobuf_specs.dev.sigstore.bundle.v1 import Bundle, VerificationMaterial
        from sigstore_protobuf_specs.dev.sigstore.common.v1 import PublicKeyIdentifier
        from sigstore_protobuf_specs.io.intoto import Envelope, Signature
    return Bundle, VerificationMaterial, PublicKeyIdentifier, Envelope, Signature


def public_key_of(key) -> PublicKey:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    der = key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return PublicKey(key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo),
                     base64.b64encode(hashlib.sha256(der).digest()).decode())


def read_public_key(path: str | Path, where: str = "--key") -> PublicKey:
    """The public key of a PEM file, to verify with (``where``: the flag or option that named it,
    "--key", "[verify] base_key"). A file that holds a private key is refused, never read as a
    key: a verifier needs only the public half, and a private key handed round for it leaks. So
    is a key torchbake does not sign with (an RSA key's bundles would only "name another key")."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    named = f"{where} {clipped(str(path))}"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{named} cannot be read ({exc.strerror or exc}).") from None
    if re.search(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----", data):
        raise ConfigurationError(f"{named} is a private key; give its public key (PEM) to verify: `openssl pkey -in"
                                 " KEY.pem -pubout -out KEY.pub` writes it. A private key is never read to verify.")
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError):  # TypeError: a key type cryptography reads but cannot use
        raise ConfigurationError(f"{named} is not a PEM public key ({KEY_TYPES}).") from None
    except UnsupportedAlgorithm as exc:
        raise ConfigurationError(f"{named} is a public key of a kind torchbake cannot read ({exc}); it verifies"
                                 f" {KEY_TYPES} keys.") from None
    if not _verifies_with(key):
        raise ConfigurationError(f"{named} is {_key_kind(key)}, which is not supported here: torchbake verifies"
                                 f" {KEY_TYPES} keys (those it signs with).")
    return public_key_of(key)


def statement(name: str, digest: str, predicate_type: str, predicate: Mapping[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 about the manifest ``digest`` (``sha256:…``) of ``name``."""
    return {"_type": STATEMENT_TYPE, "subject": [{"name": name, "digest": {"sha256": digest.split(":", 1)[1]}}],
            "predicateType": predicate_type, "predicate": dict(predicate)}


def statements(name: str, digest: str, documents: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """What is signed for one manifest: the manifest itself ("image") and each attestation
    (``documents``: kind → text; the provenance's own predicate, its subject made the manifest)."""
    found = {"image": statement(name, digest, IMAGE_PREDICATE, {})}
    for kind, text in documents.items():
        if kind in PREDICATE_TYPES:
            document = json.loads(text)
            predicate = document["predicate"] if kind == "provenance" else document
            found[kind] = statement(name, digest, PREDICATE_TYPES[kind], predicate)
    return found


def open_bundle(text: str | bytes, key: PublicKey) -> dict[str, Any]:
    """The statement a bundle signs, once its signature is checked with ``key``; a bundle that is
    not one (not UTF-8 text, over :data:`MAX_BUNDLE`, nested deeper than :data:`MAX_DEPTH`, not
    JSON), names another key, or whose signature does not match is a :class:`SignatureError`."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import Signature, SSlibKey

    bundle = load_json_bounded(text, "a Sigstore bundle")
    try:
        envelope = bundle["dsseEnvelope"]
        payload = base64.b64decode(envelope["payload"])
        signatures = envelope["signatures"]
        hint = bundle["verificationMaterial"]["publicKey"]["hint"]
        payload_type = envelope.get("payloadType", "")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SignatureError("is not a Sigstore bundle with a DSSE envelope") from None
    if not isinstance(signatures, list) or not isinstance(payload_type, str):
        raise SignatureError("is not a Sigstore bundle with a DSSE envelope (its signatures a list, its payloadType"
                             " a string)")
    if len(signatures) > MAX_SIGNATURES:
        raise SignatureError(f"carries {len(signatures):,} signatures; an envelope torchbake or cosign writes carries"
                             f" one, and over {MAX_SIGNATURES} are not checked")
    if bundle.get("mediaType") != BUNDLE_TYPE:
        raise SignatureError(f"is a bundle of {clipped(repr(bundle.get('mediaType')))}, not {BUNDLE_TYPE}")
    if hint != key.hint:
        raise SignatureError(f"names another key ({clipped(str(hint))}), not the one given ({key.hint})")
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    public = SSlibKey.from_crypto(load_pem_public_key(key.pem), keyid=key.hint)
    for signature in signatures:
        try:
            sig = base64.b64decode(signature["sig"]).hex()
        except (ValueError, KeyError, TypeError):
            continue
        dsse = Envelope(payload, payload_type, {key.hint: Signature(key.hint, sig)})
        try:
            dsse.verify([public], 1)
        except VerificationError:
            continue
        return _statement(payload_type, payload)
    raise SignatureError("has no signature that matches what it signs with this key")
