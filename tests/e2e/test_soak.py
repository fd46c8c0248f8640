"""Ten simulated nights of build-all on an engine of their own, one input changing each night
(a companion's version, then the extension wheel, made here), with `[gc] after_build_all`: every
night's images verify, and after night ten the build cache and the cache folder are within their
budgets, no torchbake image dangles, and an image the test made without torchbake is still there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.support import start_second_engine
from torchbake import cleanup
from torchbake.engine import DockerClient

from .helpers import docker, make_wheel

NIGHTS = 10
MAX_CACHE = 1 << 30  # the cache folder's budget: the torch wheel and its closure, twice over
MAX_BUILD_CACHE = 3 << 30


def test_ten_nights_stay_within_their_budgets(base_image, tmp_path_factory, run_id):
    work = tmp_path_factory.mktemp("soak")
    cache = work / "cache"
    wheels = work / "wheels"
    wheels.mkdir()
    with start_second_engine(work / "engine") as engine:
        saved = subprocess.run(["/usr/bin/docker", "save", base_image], capture_output=True, check=True).stdout
        subprocess.run(["/usr/bin/docker", "load"], input=saved, capture_output=True, check=True,
                       env={**os.environ, **engine})
        own = work / "own"  # a context of its own: the engine's data root is under `work`
        own.mkdir()
        (own / "Dockerfile").write_text(f"FROM {base_image}\nLABEL made.by=the-user\n")
        docker("build", "--quiet", "--tag", f"user/own:{run_id}", str(own), env={**engine, "DOCKER_BUILDKIT": "1"})
        matrix = work / "nightly.toml"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("TORCHBAKE_")}, **engine,
               "TORCHBAKE_PATHS_CACHE_DIR": str(cache)}
        for night in range(1, NIGHTS + 1):
            companion = make_wheel(wheels, "torchbake-soak-companion", f"1.0.{(night + 1) // 2}", [],
                                   {"soak_companion/__init__.py": ""})
            extension = make_wheel(wheels, "torchbake-soak-ext", f"2.0.{night // 2}", [],
                                   {"soak_ext/__init__.py": ""})
            sibling = work / "sibling.toml"
            sibling.write_text(f'[python]\nversion = "3.11"\n[wheels]\ntorch = "torch==2.13.0"\n'
                               f'extra = ["torchbake-soak-companion=={companion.name.split("-")[1]}"]\n'
                               f'find_links = ["{wheels}"]\nextension = "{extension}"\nextension_module = "soak_ext"\n'
                               '[build]\nvariant = "release"\nnetwork = "host"\n')
            matrix.write_text(
                f'[matrix]\nprofiles = ["cpu", "{sibling}"]\npythons = ["3.11"]\nvariants = ["release"]\n'
                f'name = "torchbake-soak/{{profile}}"\ntag = "{{variant}}-{run_id}"\n'
                f'[matrix.options.release]\n"image.base" = "{base_image}"\n"build.network" = "host"\n'
                f'[gc]\nafter_build_all = true\nkeep = 1\nmax_cache = "{MAX_CACHE}"\nmax_build_cache = "{MAX_BUILD_CACHE}"\n')
            result = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(ROOT), "build-all", "--config",
                                     str(matrix), "--report", str(work / f"night{night}.json")], cwd=ROOT, env=env,
                                    capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
            assert result.returncode == 0, f"night {night}: " + result.stdout[-4000:] + result.stderr[-2000:]
            cells = {c["id"]: c["status"] for c in json.loads((work / f"night{night}.json").read_text())["cells"]}
            assert set(cells.values()) <= {"built", "unchanged"}, (night, cells)
            assert "Disk used: engine" in result.stdout

        client = DockerClient(binary="/usr/bin/docker", version="20.10", build_mode="buildkit-env", environ=dict(engine))
        assert cleanup.build_cache_size(client) <= MAX_BUILD_CACHE
        assert sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file()) <= MAX_CACHE + (64 << 20)
        dangling = docker("images", "--filter", "dangling=true", "--filter", "label=torchbake.version", "-q",
                          env=engine).stdout.split()
        assert dangling == []
        assert docker("image", "inspect", f"user/own:{run_id}", env=engine, check=False).returncode == 0
