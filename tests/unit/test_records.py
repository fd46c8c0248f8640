"""The built-images record under concurrent writers: build-all workers and other runs record at
once, and no entry may be lost."""

from __future__ import annotations

import json
import multiprocessing
import threading

from torchbake.building.input_hash import record_built


def _record_many(state, prefix: str, count: int) -> None:
    for index in range(count):
        record_built(state, f"{prefix}-{index}", f"sha256:{prefix}{index}")


def test_many_concurrent_recorders_lose_no_entry(tmp_path):
    state = tmp_path / "built-images.json"
    processes = [multiprocessing.get_context("fork").Process(target=_record_many, args=(state, f"p{n}", 15))
                 for n in range(4)]
    threads = [threading.Thread(target=_record_many, args=(state, f"t{n}", 15)) for n in range(4)]
    for worker in (*processes, *threads):
        worker.start()
    for worker in (*processes, *threads):
        worker.join()
    assert all(p.exitcode == 0 for p in processes)
    data = json.loads(state.read_text())
    assert len(data) == 8 * 15
    assert not list(tmp_path.glob("*.tmp"))  # every rewrite was renamed into place
