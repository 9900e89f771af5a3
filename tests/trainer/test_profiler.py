"""StepProfiler: one step in N is profiled, summarized off the training thread into the top-k
ops by total time."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from trainer.profiler import StepProfiler


def test_schedule_profiles_one_step_in_n() -> None:
    prof = StepProfiler(every_steps=50, top_k=5, cuda=False, first_step=20)
    assert [s for s in range(200) if prof.should_profile(s)] == [20, 70, 120, 170]
    assert not any(StepProfiler(every_steps=0, top_k=5, cuda=False).should_profile(s)
                   for s in range(100))


def test_profiled_step_is_summarized_off_the_training_thread() -> None:
    prof = StepProfiler(every_steps=1, top_k=3, cuda=False, first_step=0)
    summarizers: list[str] = []
    original = prof._summarize

    def spy(p: object) -> None:
        summarizers.append(threading.current_thread().name)
        original(p)

    prof._summarize = spy  # type: ignore[method-assign]
    # Tens of milliseconds of matmul against microseconds of relu: wall-clock op times, so the
    # margin must outlast the scheduler's slice on a loaded machine (256x256 x20, ~6 ms, once
    # lost to a relu preempted while a benchmark shared the two cores with the tests).
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    prof.start()
    for _ in range(30):
        a @ b
    torch.relu(a)
    prof.stop()
    prof.join()
    assert summarizers == ["foreshock-profile"]
    top = prof.take()
    assert len(top) == 3
    names = [k for k, _ in top]
    assert names[0] == "aten::mm"  # the heaviest op comes first
    assert all(s > 0 for _, s in top)
    assert [s for _, s in top] == sorted((s for _, s in top), reverse=True)
    assert prof.take() == []  # each summary is exported once
    assert prof.profiled_steps == 1


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="profile_every_steps"):
        StepProfiler(every_steps=-1, top_k=3, cuda=False)
    with pytest.raises(ValueError, match="profile_top_k"):
        StepProfiler(every_steps=10, top_k=0, cuda=False)


_PROFILE_TWO_STEPS = """
import torch
from trainer.profiler import StepProfiler
prof = StepProfiler(every_steps=1, top_k=3, cuda=False, first_step=0)
a, b = torch.randn(128, 128), torch.randn(128, 128)  # made outside the profile: mm is all it sees
for _ in range(2):
    prof.start()
    for _ in range(10):
        torch.mm(a, b)  # not a @ b: its aten::matmul wrapper's own time can outweigh mm's
    prof.stop()
    prof.join()
print(prof.take()[0][0])
"""


def _profile_in_a_fresh_process(**env: str) -> subprocess.CompletedProcess[str]:
    # Kineto reads its log level once per process, so each reading needs a process of its own.
    clean = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-c", _PROFILE_TWO_STEPS], env={**clean, **env},
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=120, check=True)


def test_sampled_profiles_write_nothing_to_the_trainers_stderr() -> None:
    quiet = _profile_in_a_fresh_process()
    assert quiet.stdout.strip() == "aten::mm"
    assert "profiler_start" not in quiet.stderr, quiet.stderr
    assert quiet.stderr == ""
    # A level the user sets is theirs: kineto's lines come back (torch 2.13 prints them).
    chatty = _profile_in_a_fresh_process(KINETO_LOG_LEVEL="3")
    assert chatty.stdout.strip() == "aten::mm"
    assert chatty.stderr.count("profiler_start") == 2


def test_a_cuda_profile_without_kernels_says_how_to_see_why(
        caplog: pytest.LogCaptureFixture) -> None:
    prof = StepProfiler(every_steps=1, top_k=3, cuda=True, first_step=0)
    for _ in range(2):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            torch.randn(8, 8) @ torch.randn(8, 8)
        with caplog.at_level(logging.WARNING, logger="trainer.profiler"):
            prof._summarize(p)  # what the worker thread runs on a CUDA trainer's profile
    assert prof.take() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once, not every sampled step
    assert "no CUDA kernels" in warnings[0] and "KINETO_LOG_LEVEL=4" in warnings[0]
