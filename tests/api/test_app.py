from pathlib import Path

import httpx

from tests.conftest import LiveServer


def test_serve_answers_health_and_openapi(live_server, sqlite_url: str) -> None:
    server: LiveServer = live_server(sqlite_url)
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert spec["info"]["title"] == "Foreshock"
    assert Path(sqlite_url.split("///", 1)[1]).exists()
