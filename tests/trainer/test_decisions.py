"""The trainer's decision poller against a service that answers what it should not."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
import torch.distributed as dist

from tests.conftest import free_port
from trainer.decisions import Decision, DecisionConfig, DecisionPoller


class _Service(BaseHTTPRequestHandler):
    """Answers every decision poll with ``answer`` (the class attribute a test sets)."""

    answer: ClassVar[Any] = {"decisions": []}

    def do_GET(self) -> None:
        body = json.dumps(type(self).answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def one_rank() -> Iterator[None]:
    """A one-rank gloo group: ``agree`` broadcasts as on a real job."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank")
def test_a_decision_that_is_not_one_is_ignored_and_training_goes_on(service: str) -> None:
    # An id of "7" (or 2**70) used to reach the training thread, where broadcasting it raised
    # and stopped training; such an answer is now dropped like a failed poll.
    poller = DecisionPoller(DecisionConfig(endpoint=service, job="j", poll_interval_s=0.05))
    try:
        for bad in ([{"id": "7", "node": "n1", "state": "pending"}],
                    [{"id": 2**70, "node": "n1", "state": "pending"}],
                    [{"id": 7, "node": 5, "state": "pending"}],
                    [{"id": True, "node": "n1", "state": "pending"}]):
            _Service.answer = {"decisions": bad}
            time.sleep(0.5)  # several polls at 0.05 s
            assert poller.open_decisions == []
            assert poller.agree(step=5) is None
        _Service.answer = {"decisions": [{"id": 7, "node": "n1", "state": "pending"}]}
        time.sleep(0.5)
        assert poller.agree(step=10) == Decision(id=7, node="n1", step=10)
    finally:
        poller.close()


@pytest.mark.usefixtures("one_rank")
def test_a_decision_reported_failed_is_not_acted_on_while_polls_still_list_it(
        service: str) -> None:
    # After an elastic restart the new incarnation reports a drain whose node is gone as
    # failed; the poll that follows may still list it, and the job then "acted" on it again.
    _Service.answer = {"decisions": [{"id": 7, "node": "n1", "state": "acknowledged"}]}
    poller = DecisionPoller(DecisionConfig(endpoint=service, job="j", poll_interval_s=0.05))
    try:
        time.sleep(0.5)
        assert [d.id for d in poller.open_decisions] == [7]
        poller.report(7, "failed", note="node n1 left before the drain completed")
        assert poller.agree(step=10) is None
    finally:
        poller.close()


@pytest.mark.parametrize(("field", "value"), [
    ("poll_interval_s", float("nan")), ("poll_interval_s", float("inf")),
    ("timeout_s", float("nan")), ("timeout_s", 0.0),
])
def test_a_period_that_is_no_number_of_seconds_is_refused(field: str, value: float) -> None:
    # wait(nan) returns at once: a NaN interval had rank 0 poll the service in a busy loop.
    with pytest.raises(ValueError, match=f"decisions.{field}={value}"):
        DecisionConfig(endpoint="http://127.0.0.1:1", job="j", **{field: value})
