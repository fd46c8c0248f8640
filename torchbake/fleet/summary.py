"""The morning's view of a build-all run: a Markdown summary (GitHub's step summary, or any file
a team reads) and, when a cell failed, a Slack-compatible message to a webhook ([notify] webhook).

Everything in them that came from outside (error lines, image names, paths) is escaped as
Markdown text and passes through :func:`torchbake.core.redaction.redact`: nothing renders as
markup, no secret is shown. (Slack's ``text`` takes ``&``, ``<`` and ``>`` escaped as HTML entities.)
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shlex
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from torchbake.building import compile_stats
from torchbake.core.output import human_size
from torchbake.core.redaction import redact
from torchbake.fleet.runner import CellResult

_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def text(value: str) -> str:
    """Outside text as Markdown that shows it as it is: one line, every markup character escaped."""
    return _MARKDOWN.sub(r"\\\1", " ".join(redact(str(value)).split()))


def duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def counts(results: Mapping[str, CellResult]) -> str:
    """"2 built, 1 failed, 6 skipped": every state the run's cells ended in, in order of first seen."""
    found = Counter(str(r.status) for r in results.values())
    return ", ".join(f"{count} {status}" for status, count in found.items())


def log_line(result: CellResult) -> str:
    """The command that shows a cell's log where the summary is read: relative to the folder the
    run was started in when the log lies under it (a CI workspace, uploaded as the run's artifact)."""
    if not result.log:
        return "no log (it stopped before its build)"
    path = Path(result.log)
    with contextlib.suppress(ValueError):
        path = path.relative_to(Path.cwd())
    return code(f"less {shlex.quote(redact(str(path)))}")


def code(value: str) -> str:
    """A command as a Markdown code span (a span of two backticks around one that holds one)."""
    value = " ".join(value.split())
    return f"`` {value} ``" if "`" in value else f"`{value}`"


def markdown(results: Mapping[str, CellResult], title: str) -> str:
    """The run's summary: a line of counts, a table of every cell (status, time, size, what changed
    since the image its tag held, its compiles) and each failed cell's first error line with the
    command that shows its log."""
    lines = [f"## {text(title)}", "", counts(results) or "no cells", ""]
    if results:
        lines += ["| cell | status | time | size | changed | compiled |", "|---|---|---|---|---|---|"]
        for r in results.values():
            compiled = compile_stats.record_summary(r.compiles, r.compile_progress) if r.compiles or r.compile_progress else ""
            lines.append(f"| {text(r.id)} | {text(r.status)} | {duration(r.seconds) if r.seconds else ''} |"
                         f" {human_size(r.size_bytes) if r.size_bytes else ''} | {text(r.changed)} | {text(compiled)} |")
    failed = [r for r in results.values() if r.status.failed]
    if failed:
        lines += ["", "### Failed", ""]
        if os.environ.get("GITHUB_RUN_ID") and os.environ.get("GITHUB_REPOSITORY"):
            download = code(f"gh run download {shlex.quote(os.environ['GITHUB_RUN_ID'])}"
                            f" --repo {shlex.quote(os.environ['GITHUB_REPOSITORY'])}")
            lines += [f"Each job's logs are in its artifact: {download}, then, in the job's folder:", ""]
        lines += [f"- **{text(r.id)}** ({text(r.status)}): {text(r.error or r.reason)}; log: {log_line(r)}" for r in failed]
    skipped = [r for r in results.values() if str(r.status) == "skipped"]
    if skipped:
        lines += ["", "### Skipped", ""] + [f"- {text(r.id)}: {text(r.reason)}" for r in skipped]
    return "\n".join(lines) + "\n"


def write(path: Path, results: Mapping[str, CellResult], title: str) -> None:
    """Append the summary to ``path`` (GitHub's $GITHUB_STEP_SUMMARY is appended to by each step)."""
    with path.open("a", encoding="utf-8") as summary:
        summary.write(markdown(results, title) + "\n")


def _slack(value: str) -> str:
    return redact(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def message(results: Mapping[str, CellResult], title: str) -> dict:
    """The failed night's message, Slack-compatible (``text``): the counts, each failed cell and
    its first error line, and the run's page where GitHub gives it."""
    failed = [r for r in results.values() if r.status.failed]
    lines = [f"{_slack(title)}: {len(failed)} of {len(results)} cells failed ({_slack(counts(results))})"]
    lines += [f"• {_slack(r.id)} ({r.status}): {_slack(r.error or r.reason)}" for r in failed]
    if all(os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")):
        lines.append(f"{os.environ['GITHUB_SERVER_URL']}/{os.environ['GITHUB_REPOSITORY']}/actions/runs/"
                     f"{os.environ['GITHUB_RUN_ID']}")
    return {"text": "\n".join(lines)}


def post(url: str, results: Mapping[str, CellResult], title: str, *, timeout: float = 20) -> str:
    """POST the failed night's message to ``url``: "" when the webhook took it, else why not (one
    line, the URL never in it)."""
    body = json.dumps(message(results, title)).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 (an http(s) URL, validated)
            answer.read(65536)
        return ""
    except urllib.error.HTTPError as exc:
        return f"it answered HTTP {exc.code} {redact(str(exc.reason))}"
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        return f"it could not be reached ({redact(str(getattr(exc, 'reason', exc)))})"
