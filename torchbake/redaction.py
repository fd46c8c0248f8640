"""Secrets out of everything torchbake prints or writes.

A secret reaches torchbake in three ways: the user part of a URL (``https://user:TOKEN@host/…``,
``redis://:PASS@host``), a password file (git credentials in store format), or a value the code
knows to be one (``[dev] ccache_remote``). :func:`register` remembers each secret value of this
process; :func:`redact` replaces every remembered value, and the user part of every URL, by
``***``. The output channel, command logs, build manifests, reports, labels and error messages
all pass through :func:`redact`, so a secret never appears in any of them, wherever it came from.

:func:`split_credentials` turns a URL with credentials into the URL without them and the
``Authorization`` header that carries them (torchbake's own downloads; the host is never
``user:pass@host``).
"""

from __future__ import annotations

import base64
import re
import threading
import urllib.parse
from pathlib import Path
from typing import Any

MASK = "***"
# scheme://userinfo@ — userinfo has no "/", "@" or white space (a URL inside text, a git remote)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")
_NOT_SECRET_USERS = {"git"}  # ssh://git@host/… names an account, not a credential
_MIN_LENGTH = 3  # shorter "secrets" would mask ordinary text; nobody's password is that short

_lock = threading.Lock()
_secrets: set[str] = set()


def register(*values: str) -> None:
    """Remember secret values: from now on :func:`redact` masks them wherever they appear."""
    with _lock:
        _secrets.update(v for v in values if v and len(v) >= _MIN_LENGTH)


def register_in(value: Any) -> None:
    """Remember the credentials of every URL in ``value`` (a string, or lists and tables of them)."""
    if isinstance(value, str):
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


def redact(text: str) -> str:
    """``text`` with every URL's password (or token) and every registered secret replaced by ***."""
    if not text:
        return text
    text = _USERINFO.sub(_mask_userinfo, text)
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

