import time

from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from tests.collector.otlp_builder import gpu_sample


def test_the_service_rolls_up_and_expires_old_points_while_ingesting(store_url: str) -> None:
    settings = Settings(db_url=store_url, raw_retention_s=120, rollup_retention_s=86400,
                        maintenance_interval_s=0.2)
    now = float(int(time.time()))
    with TestClient(create_app(settings)) as c:
        for age in range(600, -1, -30):
            r = c.post("/v1/metrics", content=gpu_sample(now - age, job="j", node="a").bytes(),
                       headers={"content-type": "application/x-protobuf"})
            assert r.status_code == 200
        store = c.app.state.store  # type: ignore[attr-defined]
        deadline = time.monotonic() + 20
        oldest = 0.0
        while time.monotonic() < deadline:
            oldest = float(store.read_trace(job="j").gpu["ts"].min())
            if oldest >= now - 180:
                break
            time.sleep(0.2)
        assert now - 180 <= oldest <= now - 120
        r = c.get("/api/v1/query_range", params={"metric": "gpu.temperature", "gpu": 0,
                                                 "start": now - 700, "end": now, "step": 60})
        points = r.json()["series"][0]["points"]
        assert points[0][0] <= now - 600 and len(points) >= 10  # old minutes still answer
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM rollups")).scalar_one() > 0
