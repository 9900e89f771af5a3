import time
from pathlib import Path

from fastapi.testclient import TestClient

from api import alert_state
from api.app import create_app
from collector.store import Store
from tests.api.alerting import observation, settings
from tests.api.daemon import binary_or_skip, daemon
from tests.api.receiver import receiver
from tests.conftest import free_port


def test_real_alertmanager_routes_foreshock_alerts_to_a_webhook(sqlite_url: str,
                                                                 tmp_path: Path) -> None:
    alertmanager = binary_or_skip("prometheus-alertmanager")
    port = free_port()
    with receiver() as recv:
        config = tmp_path / "alertmanager.yml"
        config.write_text(f"""
route:
  receiver: oncall
  group_by: [alertname, job, node]
  group_wait: 100ms
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: oncall
    webhook_configs:
      - url: {recv.url}
        send_resolved: true
""")
        argv = [alertmanager, f"--config.file={config}", f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                "--log.level=warn"]
        with daemon(argv, ready_url=f"http://127.0.0.1:{port}/-/ready",
                    log_path=tmp_path / "am.log"):
            store = Store.open(sqlite_url)
            app = create_app(settings(sqlite_url, alertmanager_url=f"http://127.0.0.1:{port}"),
                             store=store)
            with TestClient(app) as client:
                with store.session() as session:
                    alert_state.fire(session, observation())
                (firing,) = recv.wait_for(1, timeout=20)
                body = firing.json()
                assert body["version"] == "4" and body["status"] == "firing"
                assert body["receiver"] == "oncall"
                (alert,) = body["alerts"]
                assert alert["labels"] == {
                    "alertname": "ForeshockGpuFailureRisk", "severity": "critical",
                    "job": "llama", "node": "node-07", "gpu": "3", "kind": "gpu"}
                assert alert["annotations"]["action"] == "checkpoint and drain node node-07"
                assert alert["generatorURL"].startswith(app.state.settings.external_url)

                with store.session() as session:
                    alert_state.resolve(session, job="llama", node="node-07", gpu=3, peer=None,
                                        kind="gpu", ts=time.time())
                resolved = recv.wait_for(2, timeout=20)[-1].json()
                assert resolved["status"] == "resolved"
                assert resolved["alerts"][0]["labels"]["node"] == "node-07"
                metrics = client.get("/metrics").text
                assert 'foreshock_alertmanager_pushes_total{result="ok"}' in metrics
