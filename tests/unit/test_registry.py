"""The registry side of torchbake without a registry: references, which hosts are spoken to over
plain HTTP, which push failures are retried, the build cache's flags, registry-prefixed names."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchbake.adapters import registry
from torchbake.adapters.engine import DockerClient
from torchbake.building.publishing import build_cache
from torchbake.configuration import validation
from torchbake.configuration.network import DownloadPolicy
from torchbake.core.errors import EngineError, RegistryError
from torchbake.fleet.matrix import expand, load_matrix
from torchbake.planning import config
from torchbake.variants.release import plan as plan_release


@pytest.mark.parametrize(("reference", "expected"), [
    ("127.0.0.1:5000/team/torch:2.13", ("127.0.0.1:5000", "team/torch", "2.13")),
    ("registry.example.com/ml/cpu", ("registry.example.com", "ml/cpu", "latest")),
    ("torchbake/pytorch-cpu:1", ("", "torchbake/pytorch-cpu", "1")),
    # pinned by digest, with or without the tag: the registry is asked for the digest
    ("127.0.0.1:5000/team/torch@sha256:" + "a" * 64, ("127.0.0.1:5000", "team/torch", "sha256:" + "a" * 64)),
    ("127.0.0.1:5000/team/torch:2.13@sha256:" + "a" * 64, ("127.0.0.1:5000", "team/torch", "sha256:" + "a" * 64)),
])
def test_references_split_into_host_repository_and_tag(reference, expected):
    assert registry.split_reference(reference) == expected


def test_the_inputs_tag_is_a_valid_tag_named_by_the_hash():
    tag = registry.inputs_tag("ab" * 32)
    validation.image_tag(tag)
    assert tag == "inputs-" + "ab" * 20


@pytest.mark.parametrize(("host", "info", "insecure"), [
    ("127.0.0.1:5000", {}, True),
    ("localhost:5000", {}, True),
    ("registry.example.com", {}, False),
    ("10.1.2.3:5000", {"RegistryConfig": {"InsecureRegistryCIDRs": ["10.0.0.0/8"]}}, True),
    ("reg.lan:5000", {"RegistryConfig": {"IndexConfigs": {"reg.lan:5000": {"Secure": False}}}}, True),
    ("127.0.0.1:5000", {"RegistryConfig": {"IndexConfigs": {"127.0.0.1:5000": {"Secure": True}}}}, False),
])
def test_plain_http_only_where_the_engine_would_use_it(host, info, insecure):
    assert registry.is_insecure(host, info) is insecure


@pytest.mark.parametrize(("message", "reason"), [
    ("Pushing a failed: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer", "connection reset"),
    ("Pushing a failed: received unexpected HTTP status: 503 Service Unavailable", "503 service unavailable"),
    ("Pushing a failed: unauthorized: authentication required", ""),
    ("Pushing a failed: denied: requested access to the resource is denied", ""),
    ("Pushing a failed: manifest invalid", ""),
])
def test_push_failures_retried_only_when_transient(message, reason):
    assert registry.push_transient(EngineError(message)) == reason


def test_a_refused_push_names_docker_login_for_that_registry():
    error = registry.push_refused(EngineError("Pushing x failed: unauthorized: authentication required"),
                                  "reg.example.com:5000/team/torch:1")
    assert isinstance(error, RegistryError)
    assert "`docker login reg.example.com:5000`" in str(error) and "was not changed" in str(error)
    assert registry.push_refused(EngineError("connection reset by peer"), "a/b:c") is None


def test_retrying_stops_at_the_first_final_failure_and_retries_transient_ones(monkeypatch):
    monkeypatch.setattr(registry.time, "sleep", lambda seconds: None)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise EngineError("connection reset by peer")
        return "ok"

    assert registry.retrying("push", flaky, DownloadPolicy(retries=4), registry.push_transient) == "ok"
    assert len(calls) == 3
    with pytest.raises(EngineError, match="unauthorized"):
        registry.retrying("push", lambda: (_ for _ in ()).throw(EngineError("unauthorized")),
                          DownloadPolicy(), registry.push_transient)


def client() -> DockerClient:
    return DockerClient(binary="/usr/bin/docker", version="26.1.5", build_mode="buildx")


def test_cache_flags_buildx_take_specs():
    assert client().cache_flags(["r:5000/a/b:c", "type=local,src=/c"], ["inline", "type=registry,ref=r/a:cache"]) == [
        "--cache-from", "type=registry,ref=r:5000/a/b:c", "--cache-from", "type=local,src=/c",
        "--cache-to", "type=inline", "--cache-to", "type=registry,ref=r/a:cache"]


def settings(**overrides):
    import os
    return config.resolve([str(config.CONFIG_DIR / "cpu.toml")], dict(os.environ), overrides, variant="release").settings()


def test_a_registry_prefixes_the_image_and_brings_the_cache_of_every_stage():
    plan = plan_release(settings(**{"registry.url": "127.0.0.1:5000/team", "image.base": "debian:bookworm"}))
    assert plan.image == "127.0.0.1:5000/team/torchbake/pytorch-cpu:2.13.0-py3.11"
    cache = "127.0.0.1:5000/team/torchbake/pytorch-cpu-buildcache:2.13.0-py3.11"
    assert build_cache(plan) == ([cache], [])  # a build that is not pushed writes nothing to the registry
    assert build_cache(plan, publish=True) == ([cache], [f"type=registry,ref={cache},mode=max,compression=zstd,oci-mediatypes=true,force-compression=true,ignore-error=true"])
    plain = plan_release(settings(**{"image.base": "debian:bookworm"}))
    assert plain.image == "torchbake/pytorch-cpu:2.13.0-py3.11" and build_cache(plain) == ([], [])
    elsewhere = plan_release(settings(**{"registry.url": "127.0.0.1:5000/team", "image.base": "debian:bookworm",
                                         "registry.cache_ref": "{name}:cache-{tag}", "registry.cache_to": ["inline"]}))
    assert build_cache(elsewhere) == (["127.0.0.1:5000/team/torchbake/pytorch-cpu:cache-2.13.0-py3.11"], ["inline"])


@pytest.mark.parametrize("bad", ["{name}", "{name}-cache:{digest}", "a cache:{tag}"])
def test_a_bad_cache_ref_is_rejected_naming_what_is_accepted(bad):
    with pytest.raises(Exception, match=r"unknown field \{digest\}|expected a reference NAME:TAG") as caught:
        settings(**{"registry.cache_ref": bad})
    assert "cache_ref" in str(caught.value)


@pytest.mark.parametrize("bad", ["http://reg.example.com", "registry", "Reg.Example.com/x", "reg.example.com/Team"])
def test_a_bad_registry_is_rejected_naming_what_is_accepted(bad):
    with pytest.raises(Exception, match="registry host") as caught:
        settings(**{"registry.url": bad})
    assert bad in str(caught.value)


def test_an_unknown_cache_field_is_rejected():
    with pytest.raises(Exception, match=r"unknown field \{digest\}"):
        settings(**{"registry.cache_from": ["{name}:{digest}"]})


def test_matrix_cells_live_in_the_matrix_registry(tmp_path: Path):
    path = tmp_path / "m.toml"
    path.write_text('[matrix]\npythons = ["3.11"]\nvariants = ["base", "dev"]\nregistry = "reg.example.com/ml"\n'
                    'name = "torchbake/{profile}"\n')
    cells = expand(load_matrix(path), source=str(path))
    assert [c.image for c in cells] == ["reg.example.com/ml/torchbake/cpu:base-py311", "reg.example.com/ml/torchbake/cpu:dev-py311"]
    assert cells[1].overrides["image.base"] == "reg.example.com/ml/torchbake/cpu:base-py311"
    assert cells[1].overrides["registry.url"] == "reg.example.com/ml"
    path.write_text('[matrix]\npythons = ["3.11"]\nregistry = "https://reg"\n')
    with pytest.raises(Exception, match="registry = 'https://reg'"):
        expand(load_matrix(path), source=str(path))


def test_compile_cache_reaches_the_dev_build_as_a_secret_file_only_we_can_read(tmp_path):
    from torchbake.core.files import secret_files
    from torchbake.variants.dev import plan as plan_dev

    url = "http://builder:s3cret@127.0.0.1:8080/ccache|connect-timeout=500"
    dev = settings(**{"build.variant": "dev", "image.base": "torchbake/pytorch-cpu:base-py3.11",
                      "dev.compile_cache": url, "paths.cache_dir": str(tmp_path)})
    plan = plan_dev(dev, python_given=False)
    with secret_files(plan.secrets()) as given:
        path = dict(given)["compile_cache"]
        assert path.read_text() == ("TORCHBAKE_COMPILE_CACHE_TOOL=ccache\nTORCHBAKE_COMPILE_CACHE_KIND='an HTTP store"
                                    " (WebDAV, or any server that takes PUT), 127.0.0.1:8080'\n"
                                    f"TORCHBAKE_CCACHE_STORAGE='{url}'\n")
        assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert not path.exists() and not path.parent.exists()  # only while the build runs
    assert not any(tmp_path.rglob("*")), "nothing of the secret is written into the cache folder"
    assert "s3cret" not in repr(plan.build_args(None)) and "s3cret" not in "".join(r for row in plan.input_rows() for r in map(str, row))


def test_a_dev_plan_with_no_cache_says_it_empties_the_compile_cache(tmp_path):
    """BuildKit drops the cache mount of a step it runs without cache: the plan says so (dev only)."""
    from torchbake.variants.dev import plan as plan_dev

    dev = settings(**{"build.variant": "dev", "image.base": "torchbake/pytorch-cpu:base-py3.11",
                      "paths.cache_dir": str(tmp_path)})
    rows = dict(plan_dev(dev, python_given=False, no_cache=True).input_rows())
    assert rows["ccache"].startswith("emptied by --no-cache")
    assert "ccache" not in dict(plan_dev(dev, python_given=False).input_rows())


@pytest.mark.parametrize("bad", ["127.0.0.1:8080/ccache", "ftp://host/x", "http://"])
def test_a_bad_compile_cache_is_rejected(bad):
    with pytest.raises(Exception, match="is no compile cache store; accepted: redis://"):
        settings(**{"dev.compile_cache": bad})


def test_an_index_of_several_platforms_is_read_as_this_hosts_image(monkeypatch):
    from torchbake.adapters import registry
    from torchbake.configuration import platforms
    index = {"manifests": [
        {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:b", "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": "sha256:c", "platform": {"os": "unknown", "architecture": "unknown"}}]}
    monkeypatch.setattr(platforms, "host", lambda: platforms.parse("aarch64"))
    assert registry.image_entry(index)["digest"] == "sha256:b"
    monkeypatch.setattr(platforms, "host", lambda: platforms.parse("amd64"))
    assert registry.image_entry(index)["digest"] == "sha256:a"
    assert registry.image_entry({"manifests": index["manifests"][1:]})["digest"] == "sha256:b"  # the one there is
    assert registry.image_entry({"schemaVersion": 2, "layers": []}) is None


@pytest.mark.parametrize(("reference", "header", "refused"), [
    ("1", "", False),
    ("1", "sha256:" + "0" * 64, True),  # a header that lies about the bytes served
    ("sha256:" + "0" * 64, "", True),  # asked by digest, served other bytes
])
def test_a_manifest_is_known_by_the_digest_of_its_bytes_never_by_a_header_alone(reference, header, refused):
    import types

    import dxf

    from torchbake.core.errors import SignatureError

    content = b'{"schemaVersion": 2}'
    response = types.SimpleNamespace(content=content, headers={"Docker-Content-Digest": header} if header else {})
    client = types.SimpleNamespace(get_manifest_and_response=lambda ref: (content.decode(), response))
    if refused:
        with pytest.raises(SignatureError, match=f"whose content is {dxf.hash_bytes(content)}"):
            registry.read_manifest(client, reference)
    else:
        assert registry.read_manifest(client, reference) == (content, dxf.hash_bytes(content))
