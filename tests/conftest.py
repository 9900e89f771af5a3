"""Fixtures every test package shares: fresh stores on SQLite and on the real PostgreSQL,
and a live ``foreshock serve`` subprocess on a free port."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from filelock import FileLock

PG_ADMIN_DSN = os.environ.get("FORESHOCK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_available() -> bool:
    try:
        with psycopg.connect(PG_ADMIN_DSN, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


@pytest.fixture
def one_torchrun_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Held by a test while it runs a multi-process torchrun job, so that the xdist workers run
    such tests one at a time: two elastic jobs at once on two cores (agents and workers all
    importing torch, each picking free ports) is where CI saw its only two hangs. (xdist's
    ``--dist loadgroup`` would do it, but with pytest 9.2 and pytest-xdist 3.8 it spread one
    group over both workers.)"""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of one run
    with FileLock(root / "torchrun.lock"):
        yield


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'foreshock.db'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database on the real PostgreSQL server, dropped afterwards."""
    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
        pytest.skip(f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    name = f"foreshock_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The same test on SQLite and on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    """A ``foreshock serve`` subprocess."""

    url: str
    port: int
    db_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, *, kill: bool = False) -> None:
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(
    db_url: str, tmp_path: Path, *, env: dict[str, str] | None = None, port: int | None = None
) -> LiveServer:
    """Start ``foreshock serve`` and wait until /healthz answers.

    Without ``port`` the server binds port 0 and the port is read from uvicorn's "running on"
    line: a port picked here and bound there could be taken in between by another xdist
    worker's server, whose /healthz would answer for this one (CI saw a test's admin call
    refused by a neighbour started without the admin token)."""
    log_path = tmp_path / f"serve-{uuid.uuid4().hex[:8]}.log"
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "api", "serve", "--db", db_url, "--port", str(port or 0)],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env=full_env,
    )
    server = LiveServer("", port or 0, db_url, proc, log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"foreshock serve exited {proc.returncode}:\n{server.log()}")
        if not server.port and (bound := _RUNNING_ON.search(server.log())):
            server.port = int(bound.group(1))
        if server.port:
            server.url = f"http://127.0.0.1:{server.port}"
            try:
                if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    server.stop(kill=True)
    raise RuntimeError(f"foreshock serve did not answer within 60 s:\n{server.log()}")


_RUNNING_ON = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Factory: ``live_server(db_url, env={...})`` starts a service; all are stopped after."""
    servers: list[LiveServer] = []

    def _start(db_url: str, **kwargs: object) -> LiveServer:
        server = start_server(db_url, tmp_path, **kwargs)  # type: ignore[arg-type]
        servers.append(server)
        return server

    yield _start
    for server in servers:
        server.stop()
