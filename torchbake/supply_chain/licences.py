"""Licences as SPDX expressions: what a Debian copyright file or a Python distribution says of its
licence, mapped to SPDX licence ids where the text names one (``license-expression`` checks every
id), and to a ``LicenseRef-`` of its own, with the text it stands for, where it does not.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping

# Debian's short licence names (DEP-5, https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/)
# that are not SPDX ids as they are written.
DEBIAN_NAMES = {
    "gpl-1": "GPL-1.0-only", "gpl-1+": "GPL-1.0-or-later", "gpl-2": "GPL-2.0-only", "gpl-2+": "GPL-2.0-or-later",
    "gpl-2.0": "GPL-2.0-only", "gpl-2.0+": "GPL-2.0-or-later", "gpl-3": "GPL-3.0-only", "gpl-3+": "GPL-3.0-or-later",
    "gpl-3.0": "GPL-3.0-only", "gpl-3.0+": "GPL-3.0-or-later", "lgpl-2": "LGPL-2.0-only", "lgpl-2+": "LGPL-2.0-or-later",
    "lgpl-2.1": "LGPL-2.1-only", "lgpl-2.1+": "LGPL-2.1-or-later", "lgpl-3": "LGPL-3.0-only",
    "lgpl-3+": "LGPL-3.0-or-later", "agpl-3": "AGPL-3.0-only", "agpl-3+": "AGPL-3.0-or-later",
    "gfdl-1.2": "GFDL-1.2-only", "gfdl-1.2+": "GFDL-1.2-or-later", "gfdl-1.3": "GFDL-1.3-only",
    "gfdl-1.3+": "GFDL-1.3-or-later", "gfdl-niv-1.3+": "GFDL-1.3-no-invariants-or-later",
    "gfdl-niv-1.3": "GFDL-1.3-no-invariants-only", "expat": "MIT", "mit/x11": "MIT", "x11": "X11",
    "bsd-2-clause": "BSD-2-Clause", "bsd-3-clause": "BSD-3-Clause", "bsd-4-clause": "BSD-4-Clause",
    "artistic": "Artistic-1.0-Perl", "artistic-1": "Artistic-1.0-Perl", "psf-2": "PSF-2.0", "mpl-1.1": "MPL-1.1",
    "mpl-2.0": "MPL-2.0", "zlib": "Zlib", "isc": "ISC", "apache-2": "Apache-2.0", "apache-2.0": "Apache-2.0",
    "sleepycat": "Sleepycat", "curl": "curl", "openssl": "OpenSSL", "ssleay": "SSLeay-standalone",
}
SEE_COPYRIGHT_FILE = "LicenseRef-see-debian-copyright-file"
# An image (or its base image) as a whole: the packages it holds, each under the licence its own entry states.
CONTENTS = "LicenseRef-image-contents"
CONTENTS_TEXT = ("The image adds no licence of its own: it holds packages, each under the licence its own entry in"
                 " this SBOM states.")
CONTENTS_COPYRIGHT = "The copyright holders of the packages it holds, as each package's own entry in this SBOM states."


_LICENSING: list = []
_LICENSING_LOCK = threading.Lock()


def spdx_licensing():
    """SPDX's licensing, built once (license-expression builds the whole licence index a call,
    50 ms) and whole before any thread has it: the library builds its tokenizer at the first
    parse and publishes it half-made, so two builds of `build-all --jobs 2` parsing at once met
    a node without children (an AttributeError, the cell failed)."""
    with _LICENSING_LOCK:
        if not _LICENSING:
            from license_expression import get_spdx_licensing

            licensing = get_spdx_licensing()
            licensing.get_advanced_tokenizer()  # built here, under the lock; parses only read it
            _LICENSING.append(licensing)
    return _LICENSING[0]


@functools.cache
def _spdx_id(name: str) -> str:
    """The SPDX id a single licence name stands for, or "" when it names none."""
    mapped = DEBIAN_NAMES.get(name.lower(), name)
    licensing = spdx_licensing()
    try:
        parsed = licensing.parse(mapped, validate=True, strict=True)
    except Exception:  # noqa: BLE001 - not a licence id
        return ""
    return str(parsed) if parsed is not None and not licensing.unknown_license_keys(parsed) else ""


def reference_for(text: str) -> str:
    """The ``LicenseRef-`` that stands for licence ``text`` that names no SPDX licence."""
    return "LicenseRef-" + (re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-")[:60] or "unnamed")


def from_debian(name: str) -> tuple[str, dict[str, str]]:
    """(SPDX expression, {LicenseRef: the text it stands for}) of a Debian copyright file's licence
    (``GPL-2+``, ``BSD-3-clause or GPL-2``, ``LGPL-2.1+ with OpenSSL exception``); "" when it
    names none (a copyright file that is not machine-readable: the caller refers to it)."""
    if not name.strip():
        return "", {}
    refs: dict[str, str] = {}

    def term(words: str) -> str:
        words = words.strip()
        found = _spdx_id(words)
        if found:
            return found
        ref = reference_for(f"debian-{words}")
        refs[ref] = f"The licence Debian's copyright file names '{words}' (its text is in that file)."
        return ref

    words = re.findall(r"[()]|[^()\s,]+", name.split("\n")[0])
    tokens, pending = [], []
    for word in [*words, ""]:  # a term is the words between operators and parentheses
        if word.lower() in ("or", "and", "(", ")", ""):
            if pending:
                tokens.append(term(" ".join(pending)))
                pending = []
            if word:
                tokens.append(word.upper() if word.lower() in ("or", "and") else word)
        else:
            pending.append(word)
    return " ".join(tokens).replace("( ", "(").replace(" )", ")"), refs


def from_python(expression: str, text: str, classifiers: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """(SPDX expression, {LicenseRef: text}) of a Python distribution's licence: its
    License-Expression, else a License field that is an SPDX expression, else the field's text or
    its licence classifiers as a reference of their own; "" when it says nothing."""
    for candidate in (expression, text):
        if candidate and _spdx_id(candidate):
            return _spdx_id(candidate), {}
        if candidate and len(candidate) <= 200:
            licensing = spdx_licensing()
            try:
                parsed = licensing.parse(candidate, validate=True, strict=True)
                if parsed is not None and not licensing.unknown_license_keys(parsed):
                    return str(parsed), {}
            except Exception:  # noqa: BLE001 - free text
                pass
    said = "; ".join(dict.fromkeys(filter(None, (expression, text, *classifiers))))
    if not said:
        return "", {}
    ref = reference_for(f"python-{said}")
    return ref, {ref: f"The licence the distribution's metadata states: {said}"}


def extracted(refs: Mapping[str, str]) -> dict[str, str]:
    """Every reference with its text, the one for unreadable copyright files included."""
    return {**refs, SEE_COPYRIGHT_FILE: "The terms in the package's /usr/share/doc/PACKAGE/copyright file, which is"
                                        " not machine-readable (not DEP-5): read them there."}
