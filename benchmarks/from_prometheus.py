"""How fast ``foreshock from-prometheus`` reads dcgm-exporter history out of a real Prometheus.

Backfills a Prometheus (``promtool tsdb create-blocks-from openmetrics``) with every DCGM field
of metrics.md for ``--nodes`` x ``--gpus`` GPUs over ``--hours`` at 30 s, starts it on loopback,
and times :func:`collector.from_prometheus.read`: queries, GPU rows and rows per second.

    python benchmarks/from_prometheus.py --nodes 16 --gpus 8 --hours 12
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from collector import from_prometheus

STEP = 30.0


def _openmetrics(path: Path, *, nodes: int, gpus: int, n: int, t0: float) -> int:
    rng = np.random.default_rng(0)
    times = [f"{t0 + j * STEP:.0f}" for j in range(n)]
    lines = 0
    with path.open("w") as f:
        for field in from_prometheus.fields()[:-1]:  # the bit mask under its current name
            f.write(f"# TYPE {field} gauge\n")
            for node in range(nodes):
                for gpu in range(gpus):
                    labels = f'gpu="{gpu}",Hostname="node-{node:03d}",job="dcgm"'
                    values = np.round(rng.uniform(0, 100, n), 1)
                    f.writelines(f"{field}{{{labels}}} {v:g} {t}\n"
                                 for v, t in zip(values, times, strict=True))
                    lines += n
        f.write("# EOF\n")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=16, help="Nodes in the fleet.")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node.")
    parser.add_argument("--hours", type=float, default=12.0, help="Hours of history at 30 s.")
    a = parser.parse_args()
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        sys.exit("needs prometheus and promtool (Debian package: apt-get install prometheus)")
    n = int(a.hours * 3600 / STEP)
    t0 = float(int(time.time() // 3600 * 3600) - (a.hours + 3) * 3600)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        began = time.perf_counter()
        samples = _openmetrics(tmp / "dcgm.om", nodes=a.nodes, gpus=a.gpus, n=n, t0=t0)
        subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                        str(tmp / "dcgm.om"), str(tmp / "tsdb")], check=True,
                       capture_output=True)
        print(f"backfilled {samples:,} samples in {time.perf_counter() - began:.1f} s")
        (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([prometheus, f"--config.file={tmp / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp / 'tsdb'}",
                                 "--storage.tsdb.retention.time=30d",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            source = from_prometheus.Source(url=url, start=t0, end=t0 + (n - 1) * STEP)
            began = time.perf_counter()
            trace = from_prometheus.read(source)
            took = time.perf_counter() - began
        finally:
            proc.terminate()
            proc.wait()
    rows = len(trace.gpu)
    print(f"{a.nodes} nodes x {a.gpus} GPUs x {a.hours:g} h at 30 s: "
          f"{from_prometheus.query_count(source)} queries, {rows:,} GPU rows of "
          f"{trace.gpu.shape[1] - 3} metrics in {took:.1f} s = {rows / took:,.0f} rows/s "
          f"({rows * (trace.gpu.shape[1] - 3) / took:,.0f} values/s)")


if __name__ == "__main__":
    main()
