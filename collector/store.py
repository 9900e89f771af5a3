"""The time-series store: one SQLAlchemy engine on SQLite (default) or PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

from collector.writer import Writer, WriteResult

if TYPE_CHECKING:
    from collector.fleet_trace import FleetTrace
    from collector.otlp import Batch

DEFAULT_URL = "sqlite:///foreshock.db"


def _on_sqlite_connect(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    # WAL: readers never block the writer; NORMAL sync is durable across process crashes
    # (a kill -9), which is the guarantee an acknowledged OTLP request needs.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=OFF")
    cur.close()


def create_store_engine(url: str) -> Engine:
    """An engine for ``url`` with the pragmas and pool settings Foreshock relies on."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _on_sqlite_connect)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8)


class Store:
    """Owns the engine; every read and write of telemetry goes through it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self.writer = Writer(engine)

    @classmethod
    def open(cls, url: str = DEFAULT_URL, *, migrate: bool = True) -> Store:
        """Connect to ``url`` and bring its schema to the newest migration."""
        store = cls(create_store_engine(url))
        if migrate:
            from collector.migrate import upgrade

            upgrade(store.engine)
        return store

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        with self.sessions() as session, session.begin():
            yield session

    def write(self, batch: Batch, *, max_series_per_job: int | None = None) -> WriteResult:
        """Store a flattened OTLP batch; committed (durable) when this returns."""
        return self.writer.write(batch, max_series_per_job=max_series_per_job)

    def jobs(self) -> list[str]:
        """The jobs the store has data for, in order."""
        with self.engine.connect() as conn:
            return [j for (j,) in conn.execute(text("SELECT DISTINCT job FROM entities "
                                                    "ORDER BY job"))]

    def read_trace(self, *, job: str | None = None, start: float | None = None,
                   end: float | None = None) -> FleetTrace:
        """The store's data (of ``job``, in ``[start, end]``) as fleet-trace frames."""
        from collector.trace_io import read_store_trace

        return read_store_trace(self, job=job, start=start, end=end)

    def write_trace(self, trace: FleetTrace, *, job: str,
                    progress: Callable[[int], None] | None = None) -> int:
        """Load a fleet trace's frames as data of ``job``; returns the points written.

        ``progress`` is called with the points of each chunk as it is committed.
        """
        from collector.trace_io import write_store_trace

        return write_store_trace(self, trace, job=job, progress=progress)

    def close(self) -> None:
        self.writer.close()
        self.engine.dispose()
