"""Secrets out of everything torchbake prints or writes.

A secret reaches torchbake in four ways: the user part of a URL (``https://user:TOKEN@host/…``,
``redis://:PASS@host``; a registry or an image reference written ``user:TOKEN@registry.example/team``),
a URL's query (a presigned object-store URL's ``X-Amz-Signature=…`` and
``X-Amz-Credential=…``, an Azure SAS's ``sig=…``, ``?token=…``: every parameter whose name says
signature, token, credential, key, secret, password or auth), an attribute of a compile cache's
storage URL that says the same (``|bearer-token=…``), a password file (git credentials in
store format), or a value the code knows to be one (``[dev] compile_cache``). :func:`register`
remembers each secret value of this process; :func:`redact` replaces every remembered value, the
user part of every URL and the secret parameters of every URL's query, by ``***``. The output
channel, command logs, build manifests, reports, labels and error messages all pass through
:func:`redact`, so a secret never appears in any of them, wherever it came from.

:func:`cache_key_url` is a URL as torchbake keys what it remembers of it (the download cache):
without its user part and without the query parameters that carry a secret or only say when a
signature expires, so a re-signed URL of the same file is the same input.

:func:`carries_mask` tells a value that went through :func:`redact` (``user:***@``, ``sig=***``):
a configuration file written by ``show-config`` cannot give the secret back, and reading it must
say so rather than send ``***`` as a password.

:func:`split_credentials` turns a URL with credentials into the URL without them and the
``Authorization`` header that carries them (torchbake's own downloads; the host is never
``user:pass@host``).
"""

from __future__ import annotations

import base64
import re
import threading
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MASK = "***"
# scheme://userinfo@ — userinfo runs to the last "@" before the host (a password may hold "@" or a
# quote: pip and urllib take them as typed); it has no "/", "?", "#" or white space
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s<>]+)@(?=[^/?#\s<>@]*(?:[/?#\s<>'\"]|$))")
# a registry or an image reference written user:password@host/… (no scheme: a URL's masking would miss it),
# the whole value; not an image's name:tag@sha256:… (a digest follows its "@")
_REFERENCE_USERINFO = re.compile(r"(?P<user>[^\s:@/]+):(?P<password>\S+)@(?!(?:sha256|sha384|sha512|blake3):)[^\s@]+")
# scheme://…?query — the query of a URL inside text (up to white space, a quote or a fragment)
_QUERY = re.compile(r"(?P<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s?#'\"<>]*)\?(?P<query>[^\s#'\"<>]*)")
# ccache's remote storage attributes, ``URL|bearer-token=…|connect-timeout=…``: one that carries a
# credential (bearer-token, password …) is masked like a query parameter
# (``|NAME=VALUE`` as ccache's own storage takes them, `` @NAME=VALUE`` as its storage helpers do);
# ``header=NAME=VALUE`` sends VALUE as a header (Authorization, an API key): its value is masked always
_STORAGE_ATTRIBUTE = re.compile(r"(?P<lead>\||\s@)(?P<name>[A-Za-z0-9_.-]+)=(?P<header>(?<=header=)[^=|\s'\"<>]*=)?"
                                r"(?P<value>[^|\s'\"<>]*)")
# a query parameter that carries a credential: S3's X-Amz-Signature, X-Amz-Credential and
# X-Amz-Security-Token, AWSAccessKeyId and Signature; GCS's X-Goog-Signature and GoogleAccessId;
# Azure SAS's sig; token=, access_token=, api_key=, password= …
_SECRET_PARAMETER = re.compile(r"(^|[-_.])sig$|signature|token|credential|key|secret|passw|auth", re.IGNORECASE)
# a query parameter that only says when a signature was made or expires (S3, GCS, Azure SAS)
_EXPIRY_PARAMETER = re.compile(r"x-(amz|goog)-(date|expires)|expires|se|st|skt|ske", re.IGNORECASE)
_NOT_SECRET_USERS = {"git"}  # ssh://git@host/… names an account, not a credential
_MIN_LENGTH = 3  # shorter "secrets" would mask ordinary text; nobody's password is that short

_lock = threading.Lock()
_secrets: set[str] = set()


def register(*values: str) -> None:
    """Remember secret values: from now on :func:`redact` masks them wherever they appear."""
    with _lock:
        _secrets.update(v for v in values if v and len(v.strip()) >= _MIN_LENGTH)  # white space is no secret


def register_in(value: Any) -> None:
    """Remember the credentials of every URL in ``value`` (a string, or lists and tables of them)."""
    if isinstance(value, str):
        for match in _STORAGE_ATTRIBUTE.finditer(value):
            if _secret_attribute(match):
                register(match["value"], urllib.parse.unquote(match["value"]))
        for match in _QUERY.finditer(value):
            for secret in _query_secrets(match["query"]):
                register(secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret))
        for match in _USERINFO.finditer(value):
            user, _, password = match["userinfo"].partition(":")
            register(urllib.parse.unquote(password) if password else "", password)
            if not password and user not in _NOT_SECRET_USERS:
                register(urllib.parse.unquote(user), user)  # a token given as the user name
    elif isinstance(value, dict):
        for item in value.values():
            register_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            register_in(item)


def register_reference(value: str) -> None:
    """Remember the password of a registry or an image reference written ``user:password@host/…``:
    the whole value, no scheme (``register_in`` finds URLs only; a pattern for such text anywhere
    would take ``mailto:name@host`` or a time for one)."""
    if isinstance(value, str) and (match := _REFERENCE_USERINFO.fullmatch(value.strip())):
        register(match["password"], urllib.parse.unquote(match["password"]))


# an environment variable whose value is a credential (HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, API_KEY):
# narrower than _SECRET_PARAMETER, whose "key" and "auth" would take KEYBOARD_LAYOUT's or AUTHOR's value for one
_SECRET_VARIABLE = re.compile(r"token|secret|passw|passphrase|credential|(^|_)(api_?)?key$|access_key|private_key",
                              re.IGNORECASE)
_PLAIN_WORDS = {"true", "false", "yes", "no", "none", "null", "on", "off"}  # a switch's value is no secret


def register_environment(variables: Mapping[str, str]) -> None:
    """Remember the values of the variables named as credentials (``HF_TOKEN=…``, ``DB_PASSWORD=…``)
    that a container or a build is given: shown as *** in commands, plans and the configuration."""
    register(*(value for name, value in variables.items() if isinstance(value, str) and _SECRET_VARIABLE.search(name)
               and value.strip().lower() not in _PLAIN_WORDS))


def secret_parameter(name: str) -> bool:
    """Whether a URL query parameter named ``name`` carries a credential."""
    return bool(_SECRET_PARAMETER.search(urllib.parse.unquote_plus(name)))


def _query_secrets(query: str) -> list[str]:
    return [value for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True) if secret_parameter(name)]


def register_credential_file(path: str | Path) -> None:
    """Remember the passwords of a git credential file (``https://user:pass@host`` per line)."""
    try:
        register_in(Path(path).expanduser().read_text(errors="replace").splitlines())
    except OSError:
        return


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _password = match["userinfo"].partition(":")
    if colon:
        return f"{match['scheme']}{user}:{MASK}@"
    if user in _NOT_SECRET_USERS:
        return match[0]
    return f"{match['scheme']}{MASK}@"


def _mask_query(match: re.Match[str]) -> str:
    parameters = []
    for parameter in match["query"].split("&"):
        name, equals, _value = parameter.partition("=")
        parameters.append(f"{name}={MASK}" if equals and secret_parameter(name) else parameter)
    return f"{match['url']}?{'&'.join(parameters)}"


def _secret_attribute(match: re.Match[str]) -> bool:
    return bool(match["header"]) or secret_parameter(match["name"])


def _mask_attribute(match: re.Match[str]) -> str:
    if not (_secret_attribute(match) and match["value"]):
        return match[0]
    return f"{match['lead']}{match['name']}={match['header'] or ''}{MASK}"


def redact(text: str) -> str:
    """``text`` with every URL's password (or token), the secret parameters of every URL's query
    and every registered secret replaced by ***."""
    if not text:
        return text
    text = _USERINFO.sub(_mask_userinfo, text)
    text = _QUERY.sub(_mask_query, text)
    text = _STORAGE_ATTRIBUTE.sub(_mask_attribute, text)
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_all(value: Any) -> Any:
    """:func:`redact` through a JSON-like document (strings in dicts and lists, keys too)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_all(k): redact_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_all(v) for v in value]
    return value


def carries_mask(value: Any) -> bool:
    """Whether a URL in ``value`` (a string, or lists and tables of them) holds ``***`` where
    :func:`redact` put it: in its user part or as the value of a secret query parameter."""
    if isinstance(value, str):
        if any(match["userinfo"].rpartition(":")[2] == MASK for match in _USERINFO.finditer(value)):
            return True
        if (reference := _REFERENCE_USERINFO.fullmatch(value)) and reference["password"] == MASK:
            return True
        if any(match["value"] == MASK and _secret_attribute(match) for match in _STORAGE_ATTRIBUTE.finditer(value)):
            return True
        return any(MASK in _query_secrets(match["query"]) for match in _QUERY.finditer(value))
    if isinstance(value, dict):
        return any(carries_mask(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(carries_mask(item) for item in value)
    return False


def cache_key_url(url: str) -> str:
    """``url`` as torchbake remembers it: without its user part, and without the query parameters
    that carry a secret or say when a signature expires (the parameters that stay keep their order).
    Re-signing an object-store URL (a new signature, a new expiry) names the same file; the file's
    content is checked by its sha256 wherever one is given."""
    parts = urllib.parse.urlsplit(split_credentials(url)[0] if "@" in url else url)
    if not parts.query:
        return urllib.parse.urlunsplit(parts)
    kept = [parameter for parameter in parts.query.split("&")
            if not secret_parameter(name := parameter.partition("=")[0])
            and not _EXPIRY_PARAMETER.fullmatch(urllib.parse.unquote_plus(name))]
    return urllib.parse.urlunsplit(parts._replace(query="&".join(kept)))


def split_credentials(url: str) -> tuple[str, str]:
    """(the URL without its user part, the ``Authorization`` header value: "" when none)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, ""
    netloc = parts.netloc.rpartition("@")[2]  # the host and port as given (a bad port fails where any URL's would)
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    register(user if parts.password is None else "", password)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), f"Basic {token}"

