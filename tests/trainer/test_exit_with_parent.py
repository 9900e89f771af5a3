"""A child started through ``trainer.exit_with_parent`` does not outlive its launcher."""

import os
import signal
import subprocess
import sys
import time

from trainer import exit_with_parent


def test_the_module_runs_with_its_arguments_while_its_launcher_lives() -> None:
    out = subprocess.run(exit_with_parent.command("json.tool", "--compact"), input='{"a": [1, 2]}',
                         capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout.strip()) == (0, '{"a":[1,2]}'), out.stderr


def test_a_launcher_gone_before_the_child_started_is_noticed_and_the_module_not_run() -> None:
    # The launcher's pid is not the child's parent by the time the child looks: as when the
    # launcher is killed while the interpreter is starting, and the child is handed to init.
    # Read at start, the new parent looked like the launcher and the module ran on for ever.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "trainer.exit_with_parent", f"--parent={gone}",
                          "http.server", "0", "--bind", "127.0.0.1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert f"process {gone}, which started http.server, is gone: not starting it" in out.stderr
    assert "Serving HTTP" not in out.stdout and time.monotonic() - started < 20


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (an exited child that nobody reaped yet is a zombie: not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_stops_once_its_launcher_is_killed() -> None:
    # A shell launches the child and is killed; the child, orphaned, sees it within a second.
    shell = subprocess.Popen(
        ["sh", "-c", f'"{sys.executable}" -m trainer.exit_with_parent --parent=$$ '
                     'http.server 0 --bind 127.0.0.1 >/dev/null 2>&1 & echo $! >&2; wait'],
        stderr=subprocess.PIPE, text=True)
    assert shell.stderr is not None
    child = int(shell.stderr.readline())
    time.sleep(2)  # the interpreter starts and the server binds
    assert _running(child)  # while its launcher lives
    shell.send_signal(signal.SIGKILL)
    shell.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not _running(child):
            return
        time.sleep(0.2)
    os.kill(child, signal.SIGKILL)
    raise AssertionError(f"the child {child} still runs 15 s after its launcher was killed")
