"""Several writers on one SQLite file: one writes, the others relay to it, none loses a point."""

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

from collector.otlp import TimeWindow, flatten
from collector.store import Store
from tests.collector.otlp_builder import gpu_sample

T0 = 1_700_000_000.0


def _write(store: Store, ts: float, node: str) -> None:
    batch = flatten(gpu_sample(ts, job="relay", node=node).request,
                    window=TimeWindow(T0 + 3600, max_future_s=300.0))
    result = store.write(batch)
    assert (result.accepted, result.rejected) == (6, 0)


def _stored(url: str) -> list[tuple[str, float]]:
    store = Store.open(url)
    try:
        gpu = store.read_trace(job="relay").gpu
    finally:
        store.close()
    return sorted(set(zip(gpu["node"].astype(str), gpu["ts"].astype(float), strict=True)))


def test_a_second_writer_relays_its_rows_to_the_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    first, second = Store.open(url), Store.open(url)
    try:
        _write(first, T0, "a")
        _write(second, T0 + 1, "b")
        _write(first, T0 + 2, "a")
        _write(second, T0 + 3, "b")
        assert (tmp_path / "relay.db.write-sock").exists()
        first.writer.close()  # the second one writes itself from now on
        _write(second, T0 + 4, "b")
    finally:
        first.close()
        second.writer.close()
        second.close()
    assert _stored(url) == [("a", T0), ("a", T0 + 2), ("b", T0 + 1), ("b", T0 + 3),
                            ("b", T0 + 4)]


def _lead(url: str, ready: object) -> None:
    store = Store.open(url)
    _write(store, T0, "leader")
    ready.set()  # type: ignore[attr-defined]
    time.sleep(60)


def test_when_the_writing_process_is_killed_the_others_write_themselves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    Store.open(url).close()
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    leader = ctx.Process(target=_lead, args=(url, ready))
    leader.start()
    try:
        assert ready.wait(60), "the leader process did not write"
        follower = Store.open(url)
        _write(follower, T0 + 1, "follower")  # relayed to the leader
        os.kill(leader.pid, signal.SIGKILL)  # type: ignore[arg-type]
        leader.join(10)
        _write(follower, T0 + 2, "follower")  # the leader is gone: written here
        _write(follower, T0 + 3, "follower")
        follower.close()
    finally:
        if leader.is_alive():
            leader.kill()
    assert _stored(url) == [("follower", T0 + 1), ("follower", T0 + 2), ("follower", T0 + 3),
                            ("leader", T0)]
