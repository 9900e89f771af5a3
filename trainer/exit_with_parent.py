"""``python -m trainer.exit_with_parent MODULE [ARG...]``: run ``MODULE`` as ``python -m`` would,
and stop it with SIGTERM once the process that started it is gone.

The demo and the elastic test cluster start a service and torchrun agents and stop them on the
way out, also on SIGTERM. A SIGKILL (the OOM killer, ``kill -9``, a CI runner tearing a job down)
runs nothing in the parent, and its children used to keep running, holding ports and CPUs. The
kernel gives an orphan a new parent, which a thread here sees within a second; SIGTERM then takes
the child down the way its own shutdown does (a torchrun agent stops its workers first).
``PR_SET_PDEATHSIG`` would do it without a thread, but setting it means ``preexec_fn``, which is
unsafe in a parent that runs threads, as the demo does.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading

POLL_S = 1.0
"""How often the parent is looked for."""


def watch(parent: int, *, poll_s: float = POLL_S) -> threading.Thread:
    """A daemon thread that sends this process SIGTERM once its parent is no longer ``parent``."""

    def run() -> None:
        stop = threading.Event()
        while not stop.wait(poll_s):
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=run, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m trainer.exit_with_parent MODULE [ARG...]")
    watch(os.getppid())
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
