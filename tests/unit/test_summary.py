"""build-all's morning summary and webhook message (torchbake.fleet.summary): outside text shows
as text, every state is counted, a webhook that does not take the message is said, not raised."""

from __future__ import annotations

import http.server
import socket

from tests.support import serving
from torchbake.core.status import Status
from torchbake.fleet import summary
from torchbake.fleet.runner import CellResult


def results() -> dict[str, CellResult]:
    return {r.id: r for r in (
        CellResult("cpu-release-py311", "x/cpu:r", Status.BUILT, seconds=125, size_bytes=3 * 1024**3,
                   changed="torch 2.12.0 -> 2.13.0"),
        CellResult("musa-dev-py310", "x/musa:d", Status.FAILED, error="[/bin/sh -c make] | *boom* <b>`x`</b>",
                   log="/var/log/tb/musa dev.log"),
        CellResult("musa-release-py310", "x/musa:r", Status.SKIPPED, "needs toolkits.mudnn_url"))}


def test_the_summary_shows_outside_text_as_text_and_counts_every_state():
    text = summary.markdown(results(), "torchbake build-all shard 1/4")
    lines = text.splitlines()
    assert lines[:3] == ["## torchbake build-all shard 1/4", "", "1 built, 1 failed, 1 skipped"]
    assert "| cpu-release-py311 | built | 2 min 5 s | 3.22 GB | torch 2.12.0 -\\> 2.13.0 |  |" in lines
    failed = next(line for line in lines if line.startswith("- **musa-dev-py310**"))
    assert "\\[/bin/sh -c make\\] \\| \\*boom\\* \\<b\\>\\`x\\`\\</b\\>" in failed  # no markup, no broken table
    assert failed.endswith("log: `less '/var/log/tb/musa dev.log'`")  # a command that works as printed
    assert "- musa-release-py310: needs toolkits.mudnn\\_url" in lines


def test_a_webhook_that_does_not_take_the_message_is_said_in_one_line():
    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    with serving(httpd):
        said = summary.post(f"http://127.0.0.1:{httpd.server_address[1]}/hooks/t0k3n", results(), "night")
    assert said.startswith("it answered HTTP 404") and "t0k3n" not in said
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once it is closed
    said = summary.post(f"http://127.0.0.1:{port}/hooks/t0k3n", results(), "night", timeout=5)
    assert said.startswith("it could not be reached (") and "t0k3n" not in said


def test_the_webhook_message_is_slacks_text_with_its_characters_escaped():
    text = summary.message(results(), "night")["text"]
    assert text.splitlines()[0] == "night: 1 of 3 cells failed (1 built, 1 failed, 1 skipped)"
    assert "• musa-dev-py310 (failed): [/bin/sh -c make] | *boom* &lt;b&gt;`x`&lt;/b&gt;" in text
