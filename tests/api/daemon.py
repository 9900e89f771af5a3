"""Start a real Prometheus or Alertmanager binary on loopback for a test, and stop it after."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest


def binary_or_skip(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package: apt-get install {name}); "
                    f"CI installs it")
    return path


@contextmanager
def daemon(argv: list[str], *, ready_url: str, log_path: Path) -> Iterator[None]:
    """Run ``argv`` until the block ends; wait until ``ready_url`` answers 200 first."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited {proc.returncode}:\n"
                                       f"{log_path.read_text(errors='replace')}")
                try:
                    if httpx.get(ready_url, timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[0]} not ready after 30 s:\n"
                                       f"{log_path.read_text(errors='replace')}")
                time.sleep(0.1)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
