"""The registry, asked without pulling: which inputs the image under a tag was built from (its
config's ``torchbake.input-hash`` label: one manifest and one few-kB config blob, no layer), and a
tag re-pointed inside the registry (a manifest copy: no layer moves).

python-dxf speaks the registry API (bearer tokens, basic auth); the credentials are the docker
CLI's (``config.json`` and its credential helpers), as the docker SDK reads them. Connection
failures and 5xx answers are retried with backoff (``[downloads]`` retries); a 4xx is final.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from torchbake.configuration import platforms
from torchbake.configuration.network import DownloadPolicy
from torchbake.core import output, references
from torchbake.core.errors import RegistryError, SignatureError
from torchbake.core.lazy import LazyModule

if TYPE_CHECKING:
    import docker
    import dxf
    import requests
else:  # imported when a registry is first asked, not when the tasks are listed
    docker = LazyModule("docker", "docker.auth")
    dxf = LazyModule("dxf", "dxf.exceptions")
    requests = LazyModule("requests")

T = TypeVar("T")
INPUTS_TAG_PREFIX = "inputs-"
MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json")


def inputs_tag(input_hash: str) -> str:
    """The tag torchbake pushes beside NAME:TAG, named by the image's input hash, so that a
    machine that has never seen the image can find it by its inputs."""
    return INPUTS_TAG_PREFIX + input_hash[:40]


def split_reference(reference: str) -> tuple[str, str, str]:
    """(registry host, repository, tag) of ``host[:port]/path/name:tag``; the host is "" when the
    reference names none (Docker Hub, which torchbake does not ask). A digest (``name@sha256:…``,
    ``name:tag@sha256:…``) is the "tag": what the registry is asked for."""
    repository, tag, digest = references.split(reference)
    host, path = docker.auth.split_repo_name(repository)
    return ("" if host == docker.auth.INDEX_NAME else host), path, digest or tag or "latest"


@dataclass(frozen=True)
class Held:
    """What a registry tag holds."""

    digest: str  # the manifest's digest
    input_hash: str  # its config's torchbake.input-hash label ("" when none)
    labels: Mapping[str, str] = field(default_factory=dict)  # its config's labels


def retrying(what: str, attempt: Callable[[], T], policy: DownloadPolicy, transient: Callable[[Exception], str]) -> T:
    """``attempt()``, again after a wait (doubled each time, at most 30 s) while it fails with an
    exception ``transient`` names a reason for, within the policy's tries and time."""
    started, tries, wait = time.monotonic(), 0, policy.retry_backoff
    while True:
        tries += 1
        try:
            return attempt()
        except Exception as exc:  # noqa: BLE001 - ``transient`` decides; the rest propagate
            reason = transient(exc)
            elapsed = time.monotonic() - started
            if not reason or tries > policy.retries or elapsed + wait > policy.retry_max_time:
                raise
            output.channel().say(f"{what} failed ({reason}); try {tries + 1} of {policy.retries + 1} in {wait:g} s.")
            time.sleep(wait)
            wait = min(wait * 2, 30.0)


def _transient(exc: Exception) -> str:
    if isinstance(exc, requests.exceptions.HTTPError) and exc.response is not None and exc.response.status_code >= 500:
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        return type(exc).__name__
    return ""


class Registry:
    """One registry host, with the docker CLI's credentials for it."""

    def __init__(self, host: str, *, insecure: bool, policy: DownloadPolicy = DownloadPolicy()):
        self.host, self.insecure, self.policy = host, insecure, policy

    def _client(self, repository: str) -> dxf.DXF:
        return dxf.DXF(self.host, repository, auth=self._authenticate, insecure=self.insecure,
                       timeout=self.policy.timeout)

    def _authenticate(self, client: dxf.DXFBase, response: requests.Response) -> None:
        found = docker.auth.resolve_authconfig(docker.auth.load_config(), registry=self.host) or {}
        if found.get("username") and found.get("password"):
            client.authenticate(found["username"], found["password"], response=response, actions=["pull", "push"])
        elif found.get("identitytoken") or found.get("IdentityToken"):
            client.authenticate("<token>", found.get("identitytoken") or found["IdentityToken"], response=response,
                                actions=["pull", "push"])
        else:
            client.authenticate(response=response, actions=["pull", "push"])

    def _ask(self, what: str, attempt: Callable[[], T]) -> T:
        """One registry request, retried while transient; every failure a RegistryError that
        says what to do."""
        try:
            return retrying(f"Registry {self.host}: {what}", attempt, self.policy, _transient)
        except requests.exceptions.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if status in (401, 403):
                raise RegistryError(
                    f"Registry {self.host} refused the credentials for {what} (HTTP {status}). Log in with"
                    f" `docker login {self.host}` (the credentials torchbake uses are docker's).") from None
            reason = exc.response.reason if exc.response is not None else ""
            raise RegistryError(f"Registry {self.host}: {what} failed: HTTP {status} {reason}".rstrip() + ".") from None
        except dxf.exceptions.DXFAuthInsecureError:
            raise RegistryError(f"Registry {self.host} asks for credentials over plain HTTP; serve it over HTTPS"
                                " (or drop its authentication) to use it from torchbake.") from None
        except RecursionError:  # a manifest or index nested past the parser's limit: hostile, not a registry fault
            raise SignatureError(f"Registry {self.host}: {what}: it answered a document nested deeper than any"
                                 " manifest or index is; nothing it says there is taken.") from None
        except (requests.exceptions.RequestException, dxf.exceptions.DXFError, OSError, ValueError) as exc:
            raise RegistryError(f"Registry {self.host} could not be asked ({what}): {exc}. Check that it is up"
                                f" and reachable: `docker login {self.host}` connects to it the same way.") from None

    def inspect(self, repository: str, tag: str) -> dict | None:
        """What ``docker image inspect`` would say of ``repository:tag`` in the registry (its Id,
        the config's digest; its Config; its RepoDigests), from the manifest and the config blob
        alone; None when the registry has no such tag."""
        client = self._client(repository)

        def look() -> dict | None:
            got = read_manifest(client, tag)
            if got is None:
                return None
            body, digest = got
            manifest = json.loads(body)
            image = image_entry(manifest)
            if image is not None:  # an index: this host's platform's image (or the image beside its attestation)
                manifest = json.loads(client.get_manifest_and_response(image["digest"])[0])
            found = {"RepoDigests": [f"{self.host}/{repository}@{digest}"], "Id": "", "Config": {}}
            if manifest.get("mediaType", MANIFEST_TYPES[0]) in MANIFEST_TYPES and "config" in manifest:
                config = json.loads(b"".join(client.pull_blob(manifest["config"]["digest"])))
                found.update(Id=manifest["config"]["digest"], Config=config.get("config") or {},
                             RootFS={"Layers": (config.get("rootfs") or {}).get("diff_ids") or []})
            return found

        return self._ask(f"look up {repository}:{tag}", look)

    def held(self, repository: str, tag: str) -> Held | None:
        """What ``repository:tag`` holds; None when the registry has no such tag."""
        found = self.inspect(repository, tag)
        if found is None:
            return None
        labels = found["Config"].get("Labels") or {}
        return Held(digest=found["RepoDigests"][0].split("@", 1)[1], input_hash=labels.get("torchbake.input-hash", ""),
                    labels=dict(labels))

    def descriptor(self, repository: str, reference: str) -> dict | None:
        """The OCI descriptor (mediaType, digest, size) of the manifest ``reference`` names, as an
        index lists it; None when the registry has no such manifest."""
        client = self._client(repository)

        def look() -> dict | None:
            got = read_manifest(client, reference)
            if got is None:
                return None
            body, digest = got
            return {"mediaType": json.loads(body).get("mediaType", MANIFEST_TYPES[0]), "digest": digest,
                    "size": len(body)}

        return self._ask(f"look up {repository}:{reference}", look)

    def put_manifest(self, repository: str, tag: str, document: bytes) -> str:
        """Store ``document`` (a manifest or index whose every manifest the registry holds) under
        ``tag``; its digest."""
        client = self._client(repository)

        def put() -> str:
            client.set_manifest(tag, document.decode())
            return dxf.hash_bytes(document)

        return self._ask(f"store {repository}:{tag}", put)

    def copy_tag(self, repository: str, source: str, target: str) -> str:
        """Point ``target`` at the manifest ``source`` names (no layer moves); its digest."""
        client = self._client(repository)

        def copy() -> str:
            text, response = client.get_manifest_and_response(source)
            client.set_manifest(target, text)
            return response.headers.get("Docker-Content-Digest", "") or dxf.hash_bytes(text.encode())

        return self._ask(f"tag {repository}:{source} as {target}", copy)


def read_manifest(client: dxf.DXF, reference: str) -> tuple[bytes, str] | None:
    """The manifest ``reference`` names, as the registry serves it, and its digest; None when the
    registry has no such manifest."""
    try:
        _, response = client.get_manifest_and_response(reference)
    except requests.exceptions.HTTPError as exc:
        if exc.response is not None and exc.response.status_code == 404:
            return None
        raise
    # the digest of the bytes served, never only what a header says of them
    digest, said = dxf.hash_bytes(response.content), response.headers.get("Docker-Content-Digest", "")
    if (said.startswith("sha256:") and said != digest) or (reference.startswith("sha256:") and reference != digest):
        raise SignatureError(f"The registry answered {reference} with a manifest whose content is {digest}, not"
                             f" {said if said.startswith('sha256:') and said != digest else reference}: nothing it"
                             " says there is taken.")
    return response.content, digest


def image_entry(index: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The image of an index that a ``docker run`` here would take: this host's platform's, else
    the first (an older push held one image beside BuildKit's provenance attestation, whose
    platform is unknown/unknown); None when ``index`` is a plain manifest."""
    entries = [m for m in index.get("manifests") or []
               if (m.get("platform") or {}).get("os", "unknown") != "unknown"
               and not (m.get("annotations") or {}).get("vnd.docker.reference.type")]
    own = [m for m in entries if m["platform"].get("architecture") == platforms.host().arch]
    return (own or entries or [None])[0]


def is_insecure(host: str, engine_info: Mapping[str, Any]) -> bool:
    """Whether the engine talks to ``host`` over plain HTTP: loopback addresses and what
    ``insecure-registries`` names (the engine's own rule)."""
    config = engine_info.get("RegistryConfig") or {}
    index = (config.get("IndexConfigs") or {}).get(host)
    if index is not None:
        return not index.get("Secure", True)
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 or host.startswith("[") else host
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if address.is_loopback:
        return True
    return any(address in ipaddress.ip_network(cidr, strict=False) for cidr in config.get("InsecureRegistryCIDRs") or [])


PUSH_TRANSIENT = ("connection reset", "broken pipe", "unexpected eof", "i/o timeout", "tls handshake timeout",
                  "connection refused", "500 internal server error", "502 bad gateway", "503 service unavailable",
                  "504 gateway timeout", "http status: 50")
PUSH_REFUSED = ("unauthorized", "authentication required", "no basic auth credentials", "denied", "401",
                "403 forbidden")


def push_transient(exc: Exception) -> str:
    """Why a failed push is worth another try ("" when it is not: a 4xx answer is final)."""
    text = str(exc).lower()
    if any(word in text for word in PUSH_REFUSED):
        return ""
    return next((word for word in PUSH_TRANSIENT if word in text), "")


def push_refused(exc: Exception, reference: str) -> RegistryError | None:
    """The error for a push the registry refused for lack of credentials, naming ``docker login``."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not any(word in text.lower() for word in PUSH_REFUSED):
        return None
    host = split_reference(reference)[0] or docker.auth.INDEX_NAME
    return RegistryError(f"Registry {host} refused the push of {reference}: {text}. Log in with `docker login {host}`"
                         " (torchbake pushes with docker's credentials); the registry's tag was not changed.")


def inspect_remote(reference: str, engine_info: Mapping[str, Any], policy: DownloadPolicy = DownloadPolicy()) -> dict | None:
    """:meth:`Registry.inspect` of a full reference (None when it names no registry host)."""
    host, repository, tag = split_reference(reference)
    if not host:
        return None
    return for_host(host, engine_info, policy).inspect(repository, tag)


def for_host(host: str, engine_info: Mapping[str, Any], policy: DownloadPolicy = DownloadPolicy()) -> Registry:
    """The registry at ``host``, spoken to over plain HTTP where the engine does so (:func:`is_insecure`)."""
    return Registry(host, insecure=is_insecure(host, engine_info), policy=policy)
