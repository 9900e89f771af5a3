import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from sqlalchemy import text

from collector.group_commit import GroupCommit
from collector.otlp import TimeWindow, flatten
from collector.store import Store
from tests.collector.otlp_builder import RequestBuilder, gpu_sample

T0 = 1_700_000_000.0


@contextmanager
def _no_lock() -> Iterator[None]:
    yield


def _wait_for(predicate: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_callers_waiting_during_a_transaction_share_the_next_one() -> None:
    flushed: list[list[int]] = []
    release = threading.Event()

    def flush(items: list[int]) -> None:
        if not flushed:
            release.wait(10)  # the first transaction is slow; the others queue behind it
        flushed.append(sorted(items))

    commit: GroupCommit[int] = GroupCommit(flush, _no_lock)
    with ThreadPoolExecutor(6) as pool:
        first = pool.submit(commit.submit, 0)
        _wait_for(lambda: commit._busy)
        rest = [pool.submit(commit.submit, i) for i in range(1, 6)]
        _wait_for(lambda: len(commit._pending) == 5)
        release.set()
        for f in [first, *rest]:
            f.result(10)
    assert flushed == [[0], [1, 2, 3, 4, 5]]


def test_a_failed_transaction_fails_each_of_its_callers_and_the_next_one_proceeds() -> None:
    calls: list[list[str]] = []

    def flush(items: list[str]) -> None:
        calls.append(items)
        if "bad" in items:
            raise RuntimeError("database is locked")

    commit: GroupCommit[str] = GroupCommit(flush, _no_lock)
    with pytest.raises(RuntimeError, match="locked"):
        commit.submit("bad")
    commit.submit("good")
    assert calls == [["bad"], ["good"]]


def test_concurrent_requests_are_all_committed(store_url: str) -> None:
    store = Store.open(store_url)
    now = T0 + 100

    def send(i: int) -> int:
        # Every request also samples one shared GPU at the same instant with another metric,
        # so requests that share a transaction upsert the same row.
        b = gpu_sample(T0 + i, gpus=2, node=f"n{i}", job="j")
        b.gauge("train.step.duration", [(T0 + i, 1.0 + i, {"rank": i})], "s")
        shared = RequestBuilder(node="shared", job="j").gauge(
            ("gpu.temperature", "gpu.power")[i % 2], [(T0, 50.0 + i % 2, {"gpu": 0})])
        a = store.write(flatten(b.request, window=TimeWindow(now, max_future_s=60)))
        c = store.write(flatten(shared.request, window=TimeWindow(now, max_future_s=60)))
        return a.accepted + c.accepted

    with ThreadPoolExecutor(8) as pool:
        accepted = sum(pool.map(send, range(16)))
    assert accepted == 16 * (6 + 1 + 1)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM points")).scalar_one() == 16
        assert conn.execute(text(
            "SELECT count(*) FROM gpu_samples g JOIN entities e ON e.id = g.entity_id "
            "WHERE e.node != 'shared'")).scalar_one() == 16 * 2
        shared_rows = conn.execute(text(
            "SELECT temperature, power FROM gpu_samples g JOIN entities e "
            "ON e.id = g.entity_id WHERE e.node = 'shared'")).all()
    assert shared_rows == [(50.0, 51.0)]
    store.close()
