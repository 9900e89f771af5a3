import json
import logging
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api import alert_state
from api.app import create_app
from api.subscriptions import SubscriptionFileError, load_file
from collector.store import Store
from tests.api.alerting import ADMIN_HEADERS, SECRET, observation, settings
from tests.api.receiver import receiver

URL = "/api/v1/subscriptions"


def test_subscriptions_crud_never_shows_the_secret(sqlite_url: str) -> None:
    app = create_app(settings(sqlite_url), store=Store.open(sqlite_url))
    with TestClient(app) as client:
        spec = {"name": "pager", "url": "https://hooks.example.com/foreshock", "secret": SECRET,
                "filters": {"severity": ["critical"], "kind": ["gpu", "link"]}}
        assert client.post(URL, json=spec).status_code == 401
        created = client.post(URL, json=spec, headers=ADMIN_HEADERS)
        assert created.status_code == 201, created.text
        sub = created.json()
        assert sub["secret_set"] and "secret" not in sub and SECRET not in created.text
        assert sub["filters"] == {"severity": ["critical"], "job": [], "kind": ["gpu", "link"]}
        assert client.post(URL, json=spec, headers=ADMIN_HEADERS).status_code == 409

        listed = client.get(URL, headers=ADMIN_HEADERS)
        assert [s["name"] for s in listed.json()] == ["pager"] and SECRET not in listed.text
        patched = client.patch(f"{URL}/{sub['id']}", headers=ADMIN_HEADERS,
                               json={"enabled": False, "secret": "a-brand-new-secret-value"})
        assert patched.status_code == 200 and not patched.json()["enabled"]
        assert "a-brand-new-secret-value" not in patched.text
        assert client.delete(f"{URL}/{sub['id']}", headers=ADMIN_HEADERS).status_code == 204
        assert client.get(f"{URL}/{sub['id']}", headers=ADMIN_HEADERS).status_code == 404


@pytest.mark.parametrize(("change", "field"), [
    ({"url": "ftp://files.example.com/x"}, "url"),
    ({"url": "hooks.example.com/no-scheme"}, "url"),
    ({"secret": "short"}, "secret"),
    ({"filters": {"kind": ["disk"]}}, "kind"),
    ({"filters": {"severity": ["page-me"]}}, "severity"),
    ({"name": "has spaces"}, "name"),
    ({"colour": "red"}, "colour"),
])
def test_invalid_subscription_is_422_naming_the_field(sqlite_url: str, change: dict[str, object],
                                                      field: str) -> None:
    app = create_app(settings(sqlite_url), store=Store.open(sqlite_url))
    spec = {"name": "pager", "url": "http://127.0.0.1:9/hook", "secret": SECRET, **change}
    with TestClient(app) as client:
        response = client.post(URL, json=spec, headers=ADMIN_HEADERS)
        assert response.status_code == 422
        assert any(field in err["loc"] for err in response.json()["detail"]), response.text
        assert "short" not in response.text or field != "secret"  # a secret is never echoed


def test_declared_subscriptions_load_at_start_and_receive_alerts(sqlite_url: str,
                                                                 tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    with receiver() as recv:
        declared = tmp_path / "webhooks.yaml"
        declared.write_text(f"""
subscriptions:
  - name: oncall
    url: {recv.url}
    secret_file: {secret_file}
    filters:
      severity: [critical]
  - name: chat
    url: http://127.0.0.1:9/chat
    secret: {SECRET}
    enabled: false
""")
        store = Store.open(sqlite_url)
        app = create_app(settings(sqlite_url, webhooks_file=declared), store=store)
        with TestClient(app) as client:
            deadline = time.monotonic() + 5
            while not client.get(URL, headers=ADMIN_HEADERS).json() and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            subs = client.get(URL, headers=ADMIN_HEADERS).json()
            assert [(s["name"], s["source"], s["enabled"]) for s in subs] == [
                ("oncall", "file", True), ("chat", "file", False)]
            edit = client.patch(f"{URL}/{subs[0]['id']}", headers=ADMIN_HEADERS,
                                json={"enabled": False})
            assert edit.status_code == 409 and "webhooks_file" in edit.text
            with store.session() as session:
                alert_state.fire(session, observation())
            (got,) = recv.wait_for(1)
            assert got.json()["receiver"] == "oncall"

        declared.write_text(json.dumps([{"name": "chat", "url": "http://127.0.0.1:9/c",
                                         "secret": SECRET}]))
        with TestClient(create_app(settings(sqlite_url, webhooks_file=declared),
                                   store=store)) as client:
            deadline = time.monotonic() + 5
            while len(client.get(URL, headers=ADMIN_HEADERS).json()) != 1 and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            assert [s["name"] for s in client.get(URL, headers=ADMIN_HEADERS).json()] == ["chat"]


def test_bad_declared_file_is_reported_naming_the_entry_and_field(
        sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "webhooks.yaml"
    bad.write_text(f"- name: ok\n  url: http://a/b\n  secret: {SECRET}\n"
                   f"- name: broken\n  url: gopher://x\n  secret: {SECRET}\n")
    with pytest.raises(SubscriptionFileError, match=r"subscriptions\[1\]\.url"):
        load_file(bad)
    with caplog.at_level(logging.ERROR, logger="foreshock.webhooks"):
        app = create_app(settings(sqlite_url, webhooks_file=bad), store=Store.open(sqlite_url))
        with TestClient(app):
            deadline = time.monotonic() + 5
            while "webhooks_file" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
    assert "subscriptions[1].url" in caplog.text and SECRET not in caplog.text
