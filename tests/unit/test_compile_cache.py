"""The compile cache's store (torchbake.configuration.compile_cache): each URL goes to the tool
that speaks it, in that tool's words; what cannot work is refused before any work, naming the
scheme, the tool and its version and what would work; the sccache branch of compile_cache.sh."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_invoke
from torchbake.configuration import compile_cache
from torchbake.core import redaction
from torchbake.core.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def read(text: str) -> dict[str, str]:
    return {name: shlex.split(value)[0] if value else "" for name, _, value in
            (line.partition("=") for line in text.splitlines())}


@pytest.mark.parametrize(("url", "environ", "expected"), [
    ("s3://AKIAEXAMPLE:s3-secret-1@nightly-cc/torch?endpoint=https://127.0.0.1:9443&region=eu-west-1", {},
     {"TORCHBAKE_COMPILE_CACHE_TOOL": "sccache", "SCCACHE_BUCKET": "nightly-cc", "SCCACHE_S3_KEY_PREFIX": "torch",
      "SCCACHE_REGION": "eu-west-1", "SCCACHE_S3_USE_SSL": "true", "SCCACHE_ENDPOINT": "https://127.0.0.1:9443",
      "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3-secret-1"}),
    ("s3://nightly-cc", {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "env-secret-2", "HOME": "/root"},
     {"TORCHBAKE_COMPILE_CACHE_TOOL": "sccache", "SCCACHE_BUCKET": "nightly-cc", "SCCACHE_S3_KEY_PREFIX": "",
      "SCCACHE_REGION": "us-east-1", "SCCACHE_S3_USE_SSL": "true", "AWS_ACCESS_KEY_ID": "AKIAENV",
      "AWS_SECRET_ACCESS_KEY": "env-secret-2"}),
    ("https://cacheuser:dav%40pass-3@cache.example:8443/cc", {},
     {"TORCHBAKE_COMPILE_CACHE_TOOL": "sccache", "SCCACHE_WEBDAV_ENDPOINT": "https://cache.example:8443/cc",
      "SCCACHE_WEBDAV_USERNAME": "cacheuser", "SCCACHE_WEBDAV_PASSWORD": "dav@pass-3"}),
    ("gha://nightly", {"ACTIONS_RESULTS_URL": "https://results.example/", "ACTIONS_RUNTIME_TOKEN": "gha-token-4"},
     {"TORCHBAKE_COMPILE_CACHE_TOOL": "sccache", "SCCACHE_GHA_ENABLED": "on", "SCCACHE_GHA_VERSION": "nightly",
      "ACTIONS_RESULTS_URL": "https://results.example/", "ACTIONS_RUNTIME_TOKEN": "gha-token-4"}),
    ("redis://:redis-pass-5@10.0.0.5:6379", {},
     {"TORCHBAKE_COMPILE_CACHE_TOOL": "ccache", "TORCHBAKE_CCACHE_STORAGE": "redis://:redis-pass-5@10.0.0.5:6379"}),
])
def test_each_store_reaches_the_tool_that_speaks_it_in_its_words_its_credentials_secrets(url, environ, expected):
    found = read(compile_cache.settings_text(url, environ))
    assert {k: v for k, v in found.items() if k != "TORCHBAKE_COMPILE_CACHE_KIND"} == expected
    for name, value in expected.items():
        if any(word in name for word in ("PASSWORD", "SECRET", "TOKEN")) or "pass-5" in value:
            assert redaction.redact(f"said {value}") == "said ***" or "***" in redaction.redact(value), name


@pytest.mark.parametrize(("url", "says"), [
    ("rediss://:pw@cache:6380", "rediss:// (Redis over TLS: ccache speaks TLS only through storage helpers"),
    ("ftp://cache/cc", "'ftp://cache/cc' is no compile cache store; accepted: redis://HOST[:PORT]"),
    ("S3://bucket", "S3://: write the scheme in lower case (s3://)"),
    ("s3://bucket?endpoint=http://10.0.0.5:9000", "endpoint 'http://10.0.0.5:9000': the store is reached over TLS only"),
    ("s3://bucket?acl=public", "s3:// takes the query parameters endpoint, region, not acl"),
    ("s3://bucket?endpoint=", "s3://: give each of endpoint, region once, with a value"),
    ("s3://AKIAK:SECRETKEY@", "s3:// names no bucket"),
    ("s3://:SECRETKEY@bucket", "s3://: KEY:SECRET@ needs both"),
    ("s3://K:S@bucket:abc/p", "s3://: the port after the host is no number"),
    ("s3://AKIAK:wJalr/K7MDENG/bPxRfiCY@bucket/p", "s3://: its user part holds a '/', '?' or '#'"),
    ("https://user:hunter2xyz#abc@dav.example/cc", "https://: its user part holds a '/', '?' or '#'"),
    ("https://u:p@dav.example:99999/cc", "https://: the port after the host is no number from 1 to 65535"),
    ("https://dav.example/cc#frag", "https://: a store's URL has no '#' part"),
    ("https://cache.example/cc|bearer-token=x", "https:// is spoken by sccache, which takes no ccache |attributes"),
])
def test_a_store_no_tool_can_use_is_refused_when_the_configuration_is_read_and_no_secret_shows(url, says):
    with pytest.raises(ValueError) as refused:
        compile_cache.store_of(url)
    shown = redaction.redact(str(refused.value))
    assert says in shown
    for secret in ("SECRETKEY", "wJalr", "K7MDENG", "bPxRfiCY", "hunter2xyz"):
        assert secret not in shown


def test_the_accepted_forms_read_as_written_through_the_masking():
    assert "s3://BUCKET[/PREFIX][?endpoint=https://HOST:PORT&region=REGION] (KEY:SECRET@ before BUCKET" in (
        redaction.redact(compile_cache.accepted()))


def test_a_host_is_kept_as_typed_ipv6_brackets_and_case():
    found = read(compile_cache.settings_text("https://u:pw-11@[::1]:8443/cc", {}))
    assert found["SCCACHE_WEBDAV_ENDPOINT"] == "https://[::1]:8443/cc"
    assert read(compile_cache.settings_text("s3://K:S-12@MyBucket/p", {}))["SCCACHE_BUCKET"] == "MyBucket"


def test_the_environment_a_store_needs_is_checked_when_the_plan_is_made():
    with pytest.raises(ConfigurationError, match="gha:// reads ACTIONS_RESULTS_URL and ACTIONS_RUNTIME_TOKEN"):
        compile_cache.check("gha://", {"ACTIONS_RESULTS_URL": "https://results.example/"})
    with pytest.raises(ConfigurationError, match="s3:// needs credentials: KEY:SECRET@ in the URL, or AWS_ACCESS_KEY_ID"):
        compile_cache.check("s3://bucket", {"AWS_ACCESS_KEY_ID": "AKIA"})


@pytest.mark.parametrize(("os_image", "refused"), [("ubuntu:20.04", "3.7.7"), ("debian:bullseye", "4.2"),
                                                   ("ubuntu:22.04", ""), ("debian:bookworm", ""), ("example/os:1", "")])
def test_a_ccache_store_in_a_base_whose_ccache_cannot_share_is_refused_naming_both(os_image, refused):
    """Ubuntu 20.04's ccache 3.7.7 and Debian 11's 4.2 have no remote storage (4.4); 22.04's 4.5.1
    shares through its secondary storage (compile_cache.sh); an OS torchbake does not know is left
    to the build, which says what it found."""
    if not refused:
        compile_cache.check_base("redis://cache:6379", os_image)
        return
    with pytest.raises(ConfigurationError) as error:
        compile_cache.check_base("redis://cache:6379", os_image)
    text = str(error.value)
    assert f"redis:// is spoken by ccache 4.4 and later; the base image's OS {os_image} ships ccache {refused}" in text
    assert "Use a store sccache speaks (s3://, https://, gha://), or a base on debian:bookworm" in text
    compile_cache.check_base("s3://bucket", os_image)  # sccache: whatever the base


def test_a_refused_store_exits_2_naming_it_before_any_work(tmp_path):
    result = run_invoke("build", "--base-img", "torchbake/none:base", "--dry-run",
                        env={"TORCHBAKE_DEV_COMPILE_CACHE": "rediss://:pw-9@cache:6380", "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "rediss:// (Redis over TLS" in result.stderr and "pw-9" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    renamed = run_invoke("build", "--base-img", "torchbake/none:base", "--dry-run",
                         env={"TORCHBAKE_DEV_CCACHE_REMOTE": "redis://cache", "TORCHBAKE_PATHS_CACHE_DIR": str(tmp_path)})
    assert renamed.returncode == 2 and "It was renamed: TORCHBAKE_DEV_COMPILE_CACHE" in renamed.stderr, renamed.stderr


def fake_sccache(folder: Path, starts: bool) -> Path:
    program = folder / "sccache"
    program.write_text("#!/bin/sh\n" + ('case "$1" in --start-server) echo started;; --version) echo "sccache 0.16.0";; esac\n'
                                        if starts else
                                        'echo "sccache: error: Server startup failed: cache storage failed to read:'
                                        ' 401 Access not authorized" >&2; exit 2\n'))
    program.chmod(0o755)
    return program


@pytest.mark.parametrize("starts", [True, False])
def test_the_compile_steps_compile_through_sccache_or_say_why_not_and_use_the_cache_mount(tmp_path, starts):
    tools = tmp_path / "sccache"
    tools.mkdir()
    fake_sccache(tools, starts)
    (tmp_path / "settings").write_text(compile_cache.settings_text("https://u:pw-10@cache.example/cc", {}))
    script = ROOT / "docker/common/compile_cache.sh"
    shown = subprocess.run(
        ["bash", "-c", f". {script}; echo \"SHARED=$TORCHBAKE_COMPILE_CACHE_SHARED TOOL=$TORCHBAKE_COMPILE_CACHE_TOOL"
                       f" CXX=${{CMAKE_CXX_COMPILER_LAUNCHER:-}} GCC=$(command -v gcc)\";"
                       " case $(command -v gcc) in /tmp/*) cat \"$(command -v gcc)\";; esac"],
        capture_output=True, text=True, check=True,
        env={"PATH": "/usr/lib/ccache:/usr/bin:/bin", "TORCHBAKE_COMPILE_CACHE_FILE": str(tmp_path / "settings"),
             "TORCHBAKE_SCCACHE_DIR": str(tools), "TORCHBAKE_CA_BUNDLE_FILE": str(tmp_path / "none")}).stdout
    if starts:
        assert "torchbake: sccache 0.16.0 compiles through the store (WebDAV over HTTPS, cache.example)" in shown
        assert f"SHARED=yes TOOL=sccache CXX={tools}/sccache GCC=/tmp/torchbake-sccache." in shown
        assert f"exec {tools}/sccache /usr/bin/gcc" in shown
    else:
        assert ("torchbake: the compile cache's store could not be used (WebDAV over HTTPS, cache.example): sccache:"
                " error: Server startup failed: cache storage failed to read: 401 Access not authorized") in shown
        assert "SHARED= TOOL= CXX= GCC=/usr/lib/ccache/gcc" in shown or "SHARED= TOOL= CXX= GCC=/usr/bin/gcc" in shown
    assert "pw-10" not in shown
