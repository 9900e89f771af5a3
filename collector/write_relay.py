"""One writing process per SQLite file: the other workers relay their rows to it.

When two processes take turns writing one SQLite file, each transaction first finds that the
other process changed the file and throws its whole page cache away, then reads back every page
it is about to modify: a write costs two to three times what it costs a process that writes
alone. So the first worker to write holds ``<db>.write-leader`` (a ``flock``, released by the
kernel when the process dies, even on ``kill -9``) and listens on ``<db>.write-sock``; the other
workers send it their rows and wait for its answer, which comes after the transaction holding
them has committed. A worker that cannot reach it, or loses it mid-request, writes the rows
itself: every write is an idempotent upsert, so rows that the leader had committed anyway are
not stored twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import marshal
import os
import socket
import struct
import threading
import time
from collections.abc import Callable

from collector.rows import Rows

log = logging.getLogger("foreshock.writer")

_HEADER = struct.Struct("<I")
_OK = b"\x00"
_UNAVAILABLE = b"\x01"  # the database refused the transaction (locked, I/O error): retry
_FAILED = b"\x02"
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux


class RelayedWriteError(RuntimeError):
    """The writing worker could not commit the relayed rows; the message says why."""

    def __init__(self, message: str, *, unavailable: bool) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class _LeaderLost(Exception):
    """The connection to the writing worker failed; the rows may or may not be committed."""


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise _LeaderLost
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv(sock: socket.socket) -> bytes:
    (n,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
    return _recv_exactly(sock, n)


class WriteRelay:
    """Relays rows to the process that writes ``database``, or is that process.

    ``commit(rows)`` writes rows in this process (returning once they are committed) and is
    what relayed rows are handed to; ``unavailable`` is the exception type meaning "retry".
    """

    def __init__(self, database: str, commit: Callable[[Rows], None],
                 unavailable: type[BaseException]) -> None:
        self._lock_path = database + ".write-leader"
        self._sock_path = database + ".write-sock"
        self._commit = commit
        self._unavailable = unavailable
        self._leader_fd: int | None = None
        self._server: socket.socket | None = None
        self._idle: list[socket.socket] = []
        self._mutex = threading.Lock()
        self.usable = len(os.fsencode(self._sock_path)) <= _MAX_SOCKET_PATH

    @property
    def is_leader(self) -> bool:
        return self._leader_fd is not None

    def write(self, rows: Rows) -> None:
        """Commit ``rows``: through the writing worker, or here if this is it or it is gone."""
        if self.usable and not self.is_leader:
            try:
                self._relay(rows)
                return
            except _LeaderLost:
                # None yet, or it died: lead if the lock is free. Either way write the rows
                # here; idempotent, so whatever a dead leader had committed is not doubled.
                self._maybe_lead()
        self._commit(rows)

    def _relay(self, rows: Rows) -> None:
        sock = self._connection()
        try:
            _send(sock, marshal.dumps(rows))
            answer = _recv(sock)
        except OSError as exc:
            sock.close()
            raise _LeaderLost from exc
        except _LeaderLost:
            sock.close()
            raise
        with self._mutex:
            self._idle.append(sock)
        if answer[:1] != _OK:
            raise RelayedWriteError(answer[1:].decode(errors="replace"),
                                    unavailable=answer[:1] == _UNAVAILABLE)

    def _connection(self) -> socket.socket:
        with self._mutex:
            if self._idle:
                return self._idle.pop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self._sock_path)
        except OSError as exc:
            sock.close()
            raise _LeaderLost from exc
        return sock

    def _maybe_lead(self) -> bool:
        """Become the writing worker if none holds the lock; True if this process is it now."""
        with self._mutex:
            if self._leader_fd is not None:
                return True
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._sock_path)  # left by a leader that died
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.bind(self._sock_path)
                server.listen(64)
            except OSError as exc:
                log.warning("write relay: cannot listen on %s (%s); workers write in turn",
                            self._sock_path, exc)
                os.close(fd)
                self.usable = False
                return False
            self._leader_fd = fd
            self._server = server
        threading.Thread(target=self._accept, args=(server,), name="write-relay",
                         daemon=True).start()
        return True

    def close(self) -> None:
        """Stop writing for the others (they then write themselves) and close the connections."""
        with self._mutex:
            server, self._server = self._server, None
            idle, self._idle = self._idle, []
            fd, self._leader_fd = self._leader_fd, None
            self.usable = False
        for sock in idle:
            sock.close()
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            server.close()
        if fd is not None:
            os.close(fd)  # releases the lock: another worker may lead

    def _accept(self, server: socket.socket) -> None:
        while self._server is server:
            try:
                conn, _ = server.accept()
            except OSError as exc:
                if self._server is not server:
                    return  # closed
                # Out of file descriptors or the like: keep serving the connections there are.
                log.warning("write relay: accept failed: %s", exc)
                time.sleep(0.1)
                continue
            threading.Thread(target=self._serve, args=(conn,), name="write-relay-conn",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    rows = marshal.loads(_recv(conn))
                except (_LeaderLost, OSError):
                    return  # the worker closed the connection (or died)
                try:
                    self._commit(rows)
                    answer = _OK
                # Any failure goes back to the worker that sent the rows: it answers its client.
                except Exception as exc:
                    status = _UNAVAILABLE if isinstance(exc, self._unavailable) else _FAILED
                    answer = status + f"{type(exc).__name__}: {exc}".encode()
                try:
                    _send(conn, answer)
                except OSError:
                    return
