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
import time

POLL_S = 1.0
"""How often the parent is looked for."""


def _watch(parent: int) -> None:
    """Send this process SIGTERM once its parent is no longer ``parent`` (a daemon thread's)."""
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m trainer.exit_with_parent MODULE [ARG...]")
    threading.Thread(target=_watch, args=(os.getppid(),), name="exit-with-parent",
                     daemon=True).start()
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
