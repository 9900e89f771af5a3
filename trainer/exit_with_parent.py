"""``python -m trainer.exit_with_parent [--parent=PID] MODULE [ARG...]``: run ``MODULE`` as
``python -m`` would, and stop it with SIGTERM once the process that started it is gone.

The demo and the elastic test cluster start a service and torchrun agents and stop them on the
way out, also on SIGTERM. A SIGKILL (the OOM killer, ``kill -9``, a CI runner tearing a job down)
runs nothing in the parent, and its children used to keep running, holding ports and CPUs. The
kernel gives an orphan a new parent, which a thread here sees within a second; SIGTERM then takes
the child down the way its own shutdown does (a torchrun agent stops its workers first).
``PR_SET_PDEATHSIG`` would do it without a thread, but setting it means ``preexec_fn``, which is
unsafe in a parent that runs threads, as the demo does.

A launcher passes its own pid (:func:`command` does): a parent that died while this interpreter
was still starting is then noticed, where the parent read at start would already be the new one.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time

POLL_S = 1.0
"""How often the parent is looked for."""


def _watch(parent: int) -> None:
    """Send this process SIGTERM once its parent is no longer ``parent`` (a daemon thread's)."""
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def command(module: str, *args: str) -> list[str]:
    """The argv that runs ``python -m module args...`` until this process is gone."""
    return [sys.executable, "-m", "trainer.exit_with_parent", f"--parent={os.getpid()}", module,
            *args]


def main() -> None:
    argv = sys.argv[1:]
    parent = os.getppid()
    if argv and argv[0].startswith("--parent="):
        parent = int(argv.pop(0).removeprefix("--parent="))
    if not argv:
        sys.exit("usage: python -m trainer.exit_with_parent [--parent=PID] MODULE [ARG...]")
    if os.getppid() != parent:
        sys.exit(f"trainer.exit_with_parent: process {parent}, which started {argv[0]}, is gone: "
                 "not starting it")
    threading.Thread(target=_watch, args=(parent,), name="exit-with-parent", daemon=True).start()
    sys.argv = argv
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
