"""``foreshock demo`` end to end, shortened: the real service, model, webhook receiver and three
torchrun agents on gloo; the degrading node is flagged, drained, and training finishes on two
nodes losing no step. Nothing is left behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)


def _leftover_procs() -> dict[int, str]:
    """Processes whose command line names a demo's temporary directory, by pid."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "foreshock-demo-" in text:
            found[int(cmdline.parent.name)] = text
    return found


def _leftovers() -> list[str]:
    return list(_leftover_procs().values())


def _demo_dirs() -> set[str]:
    """The demo's temporary directories, and torchrun log directories of a demo run."""
    tmp = Path(tempfile.gettempdir())
    return ({p.name for p in tmp.glob("foreshock-demo-*")}
            | {p.name for p in tmp.glob("torchelastic_*/demo_*")})


# The prediction races the injected failure in real time: another test loading the CPU can
# delay the flag past it (seen once with two test processes), so it runs alone.
# It runs from a shell set up for a real service: the demo must neither need nor touch it.
@pytest.mark.serial
def test_demo_flags_drains_and_resumes_losing_no_step(tmp_path: Path) -> None:
    before = _demo_dirs()
    drained_for_real = tmp_path / "scheduler-was-called"
    shell = {**os.environ,
             "FORESHOCK_INGEST_TOKEN": "a-real-services-token",
             "FORESHOCK_DRAIN_COMMAND": f"touch {drained_for_real}",
             "FORESHOCK_DRAIN_MAX_PER_HOUR": "0", "FORESHOCK_ALERT_FIRE_AT": "0.99",
             "FORESHOCK_ALERT_PERSIST_S": "900"}
    proc = subprocess.run(
        [sys.executable, "-m", "api", "demo", "--json", "--fail-after", "70", "--develop", "55",
         "--timeout", "170"],
        capture_output=True, text=True, timeout=220, check=False, env=shell)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    what = [m["what"] for m in summary["timeline"]]
    assert proc.returncode == 0, (summary["missing"], what, proc.stderr[-3000:])
    assert summary["ok"] is True
    assert summary["lead_time_s"] > 0  # flagged before the failure struck
    assert summary["steps_lost"] == 0
    assert summary["drain_step"] == summary["resumed_from_step"]
    assert sorted(summary["finished_nodes"]) == ["node-a", "node-b"]
    assert summary["victim"] == "node-c"
    assert summary["webhook_deliveries"] >= 1 and summary["webhook_rejected"] == 0
    for event in ("signed alert received", "on-demand checkpoint", "node drained",
                  "training resumed", "injected failure would have struck", "training finished"):
        assert event in what, what
    assert summary["reactive"]["steps_lost"] >= 0
    assert _leftovers() == []
    assert _demo_dirs() - before == set()  # its temporary directory is gone
    assert not drained_for_real.exists()  # the shell's scheduler command was never run


@contextlib.contextmanager
def _launched_demo() -> Iterator[subprocess.Popen[str]]:
    """``foreshock demo`` once its service and three torchrun agents run. Whatever is left of it
    afterwards, processes or directories, is removed so that no later test meets it."""
    before = _demo_dirs()
    proc = subprocess.Popen([sys.executable, "-m", "api", "demo"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if "agents launched" in line:
                break
        assert len(_leftovers()) >= 4, "".join(seen)  # the service and the three agents
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _leftover_procs():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for name in _demo_dirs() - before:
            shutil.rmtree(Path(tempfile.gettempdir()) / name, ignore_errors=True)


def _leftovers_after(seconds: float) -> list[str]:
    """``_leftovers()`` once none is left or ``seconds`` have passed (a liveness bound)."""
    deadline = time.monotonic() + seconds
    while _leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    return _leftovers()


@pytest.mark.usefixtures("one_torchrun_job")
def test_a_terminated_demo_takes_its_service_and_agents_with_it() -> None:
    # SIGTERM is how timeout(1), a scheduler or a cancelled CI job stops a command; it used to
    # kill the demo outright and leave its service and three torchrun agents running.
    before = _demo_dirs()
    with _launched_demo() as proc:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert proc.returncode == 128 + signal.SIGTERM
        assert _leftovers_after(15) == []  # workers exit just after their agents
        assert _demo_dirs() - before == set()


@pytest.mark.usefixtures("one_torchrun_job")
def test_a_killed_demo_leaves_no_service_or_agent_running() -> None:
    # SIGKILL runs nothing in the demo (the OOM killer, kill -9): its service and three torchrun
    # agents used to run on, orphaned. Each now sees its parent gone and stops itself. Only its
    # temporary directory stays, which nothing can remove.
    with _launched_demo() as proc:
        proc.kill()
        proc.wait(10)
        assert _leftovers_after(20) == []  # a second to notice, then each one's shutdown


def test_demo_refuses_a_scenario_that_cannot_work() -> None:
    proc = subprocess.run([sys.executable, "-m", "api", "demo", "--nodes", "1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0
    assert "--nodes" in proc.stderr


@pytest.mark.parametrize("option", ["--fail-after", "--timeout"])
def test_demo_refuses_an_infinite_time(option: str) -> None:
    # --fail-after inf ended in a traceback (OverflowError) and --timeout inf ran for ever.
    proc = subprocess.run([sys.executable, "-m", "api", "demo", option, "inf"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    name = {"--fail-after": "fail_after_s", "--timeout": "timeout_s"}[option]
    assert f"demo.{name}=inf must be a finite number" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr
