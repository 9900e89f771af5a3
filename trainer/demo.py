"""``foreshock demo``: the whole loop on one machine without a GPU, in under three minutes.

The service on a temporary SQLite store and a signed-webhook receiver; a 3-node elastic CPU
training (one torchrun agent per node, the example trainer with the telemetry hook and simulated
GPUs); a degradation injected on one GPU of one node that ends in a failure at a set time. The
service's normal scoring flags it, the receiver gets the signed alert, the trainer checkpoints
and drains the node, and training finishes on the others. Nothing is faked: where a part does
not do its job, the demo says so, and if the node is still there when the failure strikes, it
is killed and the job takes the ordinary elastic restart.
"""

from __future__ import annotations

import math
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from collector.store import create_store_engine
from predictor.hysteresis import PolicyConfig
from trainer import exit_with_parent
from trainer.demo_report import Mark, Summary, alert_detail, figures
from trainer.drain import read_events
from trainer.elastic import ElasticCluster, ElasticConfig, free_port
from trainer.receiver import WebhookReceiver
from trainer.simulated_gpu import KINDS

JOB = "demo"
ADMIN_TOKEN = "demo-admin-token"
_DEMO_INHERITS = frozenset({"FORESHOCK_MODEL_PATH"})


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """The demo's scenario."""

    nodes: int = 3
    fail_after_s: float = 95.0
    """The injected failure strikes this long after the nodes are launched."""
    develop_s: float = 75.0
    """The degradation develops over this long before it fails."""
    kind: str = "ecc"
    """Degradation kind of the simulated GPU (ecc, thermal, nvlink, pcie, power)."""
    gpu: int = 0
    gpus_per_node: int = 4
    step_period_s: float = 0.25
    """Each step takes this long (a paced CPU model standing in for a large one)."""
    checkpoint_every: int = 40
    """Periodic checkpoint every this many steps."""
    tail_s: float = 15.0
    """Training goes on this long past the failure moment."""
    score_interval_s: float = 2.0
    alert_time_compression: float = 150.0
    """The service's alert lanes run this many times faster. The demo compresses a degradation
    of hours into a minute, so it compresses every lane's hold too: 15 minutes at the alert
    threshold (0.55) become 6 s, the middle lane's 25 minutes at 0.35 become 10 s, and so on
    (``PolicyConfig.compressed``). With the hours as they are, only the fire-at-once lane (risk
    >= 0.92) could flag the node in time, and the one-minute ramp need not reach it. The drain
    policy is the service's own: an alert drains the node at risk 0.5 or more."""
    timeout_s: float = 175.0
    keep_dir: Path | None = None
    """Keep the run's store, logs and checkpoints here instead of deleting them."""

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError(f"demo.nodes={self.nodes} must be >= 2 (one is drained)")
        if not self.alert_time_compression > 0:
            raise ValueError(f"demo.alert_time_compression={self.alert_time_compression} "
                             "must be > 0")
        if not 0 < self.develop_s < self.fail_after_s:
            raise ValueError(f"demo.develop_s={self.develop_s} must be in (0, fail_after_s)")
        for name in ("fail_after_s", "timeout_s"):  # inf: no failure to foresee, no end
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"demo.{name}={getattr(self, name)} must be a finite number of "
                                 "seconds")
        if self.kind not in KINDS:
            raise ValueError(f"demo.kind={self.kind!r} must be one of {', '.join(KINDS)}")
        if not 0 <= self.gpu < self.gpus_per_node:
            raise ValueError(f"demo.gpu={self.gpu} must be in 0..{self.gpus_per_node - 1}")

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"node-{chr(ord('a') + i)}" for i in range(self.nodes))

    @property
    def victim(self) -> str:
        return self.node_names[-1]


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (``timeout``, a scheduler, a closed CI job) unwinds like Ctrl-C, so that the
    service, the torchrun agents and the temporary directory go with the demo instead of being
    left running. (A SIGKILL runs nothing here: ``trainer.exit_with_parent`` stops them then.)"""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a handler; its caller owns the signals
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Demo:
    """Runs the scenario once; ``on_mark`` hears each timeline moment as it happens."""

    def __init__(self, config: DemoConfig, *, on_mark: Callable[[Mark], None],
                 on_status: Callable[[str], None]) -> None:
        self.config, self.on_mark, self.on_status = config, on_mark, on_status
        self.marks: list[Mark] = []
        self._seen: set[str] = set()

    def mark(self, key: str, what: str, detail: str = "", t: float | None = None) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        m = Mark(t=time.time() if t is None else t, what=what, detail=detail)
        self.marks.append(m)
        self.on_mark(m)

    def run(self) -> Summary:
        with _sigterm_unwinds():
            if self.config.keep_dir is not None:
                self.config.keep_dir.mkdir(parents=True, exist_ok=True)
                return self._run(self.config.keep_dir)
            with tempfile.TemporaryDirectory(prefix="foreshock-demo-") as work:
                return self._run(Path(work))

    def _run(self, work: Path) -> Summary:
        c = self.config
        started = time.time()
        secret = secrets.token_hex(16)
        receiver = WebhookReceiver(secret).start()
        service: subprocess.Popen[bytes] | None = None
        cluster: ElasticCluster | None = None
        summary = Summary(ok=False, victim=c.victim, failure_at=math.nan, started_at=started)
        # Loading the model takes seconds: check it while the service starts.
        check = threading.Thread(target=lambda: summary.missing.extend(_missing_parts()),
                                 daemon=True)
        check.start()
        try:
            url, service = self._start_service(work, receiver.url, secret)
            self.mark("service", "service up", f"{url}, SQLite store in a temporary directory; "
                      f"alert lanes run {c.alert_time_compression:g}x faster, as the ramp does: "
                      f"{_lanes(PolicyConfig().compressed(c.alert_time_compression))}")
            check.join()
            for item in summary.missing:
                self.mark(item, "missing", item)
            launch = time.time()
            failure_at = launch + c.fail_after_s
            summary.failure_at = failure_at
            cluster = ElasticCluster(
                ElasticConfig(nodes=c.node_names, min_nodes=c.nodes - 1, run_id="demo"),
                argv=self._trainer_argv(url, work, launch=launch, failure_at=failure_at),
                log_dir=work / "logs",
                env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
            cluster.start()
            self.mark("launch", f"{c.nodes} torchrun agents launched",
                      f"--nnodes={c.nodes - 1}:{c.nodes}; {c.kind} degradation on GPU {c.gpu} "
                      f"of {c.victim} from t+{c.fail_after_s - c.develop_s:.0f} s")
            self._watch(cluster, url, work, receiver, summary)
        finally:
            if cluster is not None:
                cluster.stop()
            if service is not None:
                service.terminate()
                try:
                    service.wait(10)
                except subprocess.TimeoutExpired:
                    service.kill()
                    service.wait()
            receiver.stop()
        summary.webhook_deliveries = len(receiver.deliveries)
        summary.webhook_rejected = receiver.rejected
        summary.timeline = list(self.marks)
        return summary

    def _start_service(self, work: Path, receiver_url: str,
                       secret: str) -> tuple[str, subprocess.Popen[bytes]]:
        port = free_port()
        hooks = work / "webhooks.json"
        hooks.write_text(f'[{{"name": "demo", "url": "{receiver_url}", "secret": "{secret}"}}]')
        self.db_url = f"sqlite:///{work / 'foreshock.db'}"
        env = {**service_environ(os.environ),
               "FORESHOCK_SCORE_INTERVAL_S": str(self.config.score_interval_s),
               "FORESHOCK_ADMIN_TOKEN": ADMIN_TOKEN, "FORESHOCK_WEBHOOKS_FILE": str(hooks),
               "FORESHOCK_DRAIN_MIN_NODES": str(self.config.nodes - 1),
               "FORESHOCK_ALERT_TIME_COMPRESSION": str(self.config.alert_time_compression),
               "FORESHOCK_EXTERNAL_URL": f"http://127.0.0.1:{port}"}
        log = (work / "serve.log").open("wb")
        proc = subprocess.Popen(exit_with_parent.command("api", "serve", "--db", self.db_url,
                                                         "--port", str(port),
                                                         "--log-level", "warning"),
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"foreshock serve exited {proc.returncode}: "
                                   f"{(work / 'serve.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return url, proc
            except httpx.HTTPError:
                time.sleep(0.1)
        proc.kill()
        raise RuntimeError("foreshock serve did not answer within 60 s")

    def _trainer_argv(self, url: str, work: Path, *, launch: float,
                      failure_at: float) -> list[str]:
        c = self.config
        steps = math.ceil((c.fail_after_s + c.tail_s) / c.step_period_s)
        start_at = failure_at - c.develop_s
        return ["-m", "trainer.example", "--steps", str(steps), "--d-model", "64",
                "--layers", "1", "--seq-len", "32", "--batch-size", "4", "--log-every", "0",
                "--step-period", str(c.step_period_s),
                "--endpoint", url, "--job", JOB, "--gpu", "simulated",
                "--simulated-gpus", str(c.gpus_per_node), "--export-interval", "1",
                "--probe-interval", "0", "--profile-every", "0",
                "--checkpoint-dir", str(work / "ckpt"),
                "--checkpoint-every", str(c.checkpoint_every),
                "--decisions", "--poll-interval", "1", "--agree-every", "4",
                "--min-nodes", str(c.nodes - 1),
                "--inject", f"{c.kind}:{c.gpu}:{start_at:.3f}:{failure_at:.3f}",
                "--inject-node", c.victim]

    def _watch(self, cluster: ElasticCluster, url: str, work: Path, receiver: WebhookReceiver,
               summary: Summary) -> None:
        c = self.config
        deadline = summary.started_at + c.timeout_s
        engine = create_store_engine(self.db_url)
        http = httpx.Client(timeout=2)
        try:
            while cluster.running():
                now = time.time()
                if now > deadline:
                    self.mark("timeout", "demo timed out", f"after {c.timeout_s:.0f} s")
                    summary.missing.append("the run did not finish within the time limit")
                    break
                events = read_events(work / "ckpt")
                self._note_events(events, summary)
                risk = self._risk(engine, c.victim)
                if risk is not None and risk >= 0.2:
                    band = min(int(risk * 5), 4)
                    self.mark(f"risk{band}", "risk rising",
                              f"{c.victim} GPU {c.gpu}: risk {risk:.2f}")
                first = receiver.first_firing(node=c.victim)
                if first is not None:
                    summary.alert_at = first.received_at
                    self.mark("alert", "signed alert received",
                              alert_detail(first.payload, c.victim), t=first.received_at)
                self._note_decisions(http, url)
                drained = any(e["event"] == "drain" for e in events)
                if now >= summary.failure_at:
                    if drained:
                        self.mark("failure", "injected failure would have struck",
                                  f"{c.victim} already drained", t=summary.failure_at)
                    elif c.victim in cluster.running():
                        cluster.kill_node(c.victim)
                        self.mark("failure", "injected failure strikes",
                                  f"{c.victim} was not drained in time: killed, ordinary "
                                  "elastic restart", t=summary.failure_at)
                step = _progress(events)
                self.on_status(f"t+{now - summary.started_at:5.1f} s  {step}  "
                               f"risk({c.victim})={'—' if risk is None else f'{risk:.2f}'}  "
                               f"failure in {max(0.0, summary.failure_at - now):4.0f} s")
                time.sleep(0.5)
            codes = cluster.wait(20)
            self._note_events(read_events(work / "ckpt"), summary)
            summary.finished_nodes = [n for n, code in codes.items() if code == 0]
            if summary.finished_nodes:
                self.mark("finished", "training finished",
                          f"on {len(summary.finished_nodes)} nodes: "
                          f"{', '.join(summary.finished_nodes)}")
        finally:
            http.close()
            engine.dispose()
        figures(read_events(work / "ckpt"), summary, checkpoint_every=c.checkpoint_every,
                step_period_s=c.step_period_s, nodes=c.nodes)

    def _note_events(self, events: list[dict[str, Any]], summary: Summary) -> None:
        for i, e in enumerate(events):
            kind, ts = e["event"], e["ts"]
            if kind == "started" and i == 0:
                self.mark("started", "training started",
                          f"{e['world_size']} ranks on {', '.join(e['nodes'])}", t=ts)
            elif kind == "checkpoint" and str(e.get("reason", "")).startswith("drain"):
                self.mark("ckpt", "on-demand checkpoint", f"step {e['step']} in "
                          f"{e['duration_s']:.2f} s ({e['path']})", t=ts)
            elif kind == "drain":
                self.mark("drain", "node drained", f"{e['node']} leaves; "
                          f"{', '.join(e['nodes_left'])} re-rendezvous", t=ts)
            elif kind == "resumed":
                self.mark("resumed", "training resumed",
                          f"step {e['step']} on {', '.join(e['nodes'])}", t=ts)
            elif kind == "started" and i > 0 and e.get("checkpoint"):
                self.mark(f"restart{i}", "ranks restarted", f"{e['world_size']} ranks from "
                          f"{e['checkpoint']}", t=ts)

    def _note_decisions(self, http: httpx.Client, url: str) -> None:
        try:
            decisions = http.get(f"{url}/api/v1/decisions", params={"job": JOB}).json()
        except (httpx.HTTPError, ValueError):
            return
        for d in decisions:
            self.mark(f"decision{d['id']}", "decision taken",
                      f"#{d['id']}: checkpoint and drain {d['node']}", t=d["created_at"])

    @staticmethod
    def _risk(engine: Any, node: str) -> float | None:
        try:
            with engine.connect() as conn:
                value = conn.execute(text(
                    "SELECT max(risk) FROM risk_scores WHERE job = :job AND node = :node "
                    "AND ts >= :since"), {"job": JOB, "node": node,
                                          "since": time.time() - 30}).scalar()
        except Exception:  # the table may not exist yet: the demo just waits
            return None
        return None if value is None else float(value)


def service_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the settings of a real service: a shell set up for one would point
    the demo's service at its Alertmanager and scheduler (``FORESHOCK_ALERTMANAGER_URL``,
    ``FORESHOCK_DRAIN_COMMAND``), demand a token the demo's trainers do not send, or hold and
    cap the alerts and drains it shows. Only the model (``FORESHOCK_MODEL_PATH``) is kept."""
    return {k: v for k, v in environ.items()
            if not k.startswith("FORESHOCK_") or k in _DEMO_INHERITS}


def _lanes(policy: PolicyConfig) -> str:
    """``policy``'s lanes in words: 0.55 held 6 s, 0.65 held 4 s, ..."""
    return ", ".join(f"{level:g} held {hold:g} s{' on a link' if kind else ''}"
                     for level, hold, kind in policy.lanes if level is not None)


def _missing_parts() -> list[str]:
    """Parts of the loop owned elsewhere that are not there: said up front, never faked."""
    missing = []
    try:
        from predictor.scorer import load_model

        # The same model the service will load: FORESHOCK_MODEL_PATH, else the shipped one.
        load_model(os.environ.get("FORESHOCK_MODEL_PATH") or None)
    except Exception as exc:  # any failure means the service cannot score either
        missing.append(f"the predictor's default model cannot be loaded ({exc}): "
                       "nothing will flag the degradation")
    return missing


def _progress(events: list[dict[str, Any]]) -> str:
    last = events[-1] if events else None
    return f"last event: {last['event']} (step {last.get('step', '?')})" if last else "starting"

