"""Group commit: concurrent writers of one process share a transaction and its commit.

Each commit has a fixed cost that does not shrink with the batch: on SQLite every request
rewrites the last page of each series it touches (a 5,000-point request dirties ~2,000 pages,
8 MiB of WAL), on PostgreSQL every commit waits for a WAL flush. Requests that arrive while a
transaction is being written wait and are then written together, in one transaction: a page
dirtied by several requests is written once, and one flush makes all of them durable. Every
caller returns (or raises) only after the transaction holding its rows has committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Job(Generic[T]):
    item: T
    done: bool = False
    error: BaseException | None = field(default=None)


class GroupCommit(Generic[T]):
    """Runs ``flush(items)`` for the items of all callers waiting at the time, one at a time.

    ``lock`` is taken before the waiting items are collected, so callers that arrive while
    another process holds the database's write lock join the next transaction.
    """

    def __init__(self, flush: Callable[[list[T]], None],
                 lock: Callable[[], AbstractContextManager[None]], *, max_items: int = 16
                 ) -> None:
        self._flush = flush
        self._lock = lock
        self._max_items = max_items
        self._cv = threading.Condition()
        self._pending: list[_Job[T]] = []
        self._busy = False

    def submit(self, item: T) -> None:
        """Write ``item``; returns once it is committed, raises what its transaction raised."""
        job: _Job[T] = _Job(item)
        with self._cv:
            self._pending.append(job)
            while self._busy and not job.done:
                self._cv.wait()
            if job.done:
                if job.error is not None:
                    raise job.error
                return
            self._busy = True  # this caller leads the next transaction
        jobs: list[_Job[T]] = []
        error: BaseException | None = None
        try:
            with self._lock():
                with self._cv:
                    jobs = self._take(job)
                self._flush([j.item for j in jobs])
        except BaseException as exc:
            error = exc
        finally:
            with self._cv:
                if not jobs:  # taking the lock failed: nothing was written
                    self._pending.remove(job)
                for j in jobs:
                    j.done, j.error = True, error
                self._busy = False
                self._cv.notify_all()
        if error is not None:
            raise error

    def _take(self, leader: _Job[T]) -> list[_Job[T]]:
        # The leader's own rows always go in; a bounded group keeps one transaction's memory
        # and latency bounded (the rest wait for the next one).
        others = [j for j in self._pending if j is not leader][: self._max_items - 1]
        taken = [leader, *others]
        self._pending = [j for j in self._pending if not any(j is t for t in taken)]
        return taken
