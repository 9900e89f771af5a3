#!/usr/bin/env bash
# GPU checks of the trainer hook, as one script (about 3 minutes on one H200):
#   1. the real NvmlGpuReader: every gpu.* metric read on every GPU, none failing;
#   2. the `gpu`-marked pytest (NvmlGpuReader against the real GPU);
#   3. the example trainer on NCCL (torchrun, one rank per GPU, at most 2) with collective
#      timing (CUDA events), CUDA kernel profiles and NVML telemetry, sent to a local OTLP
#      sink that prints what arrived;
#   4. the hook-overhead benchmark on the GPU.
# Needs: `python` with CUDA torch, nvidia-ml-py and the OpenTelemetry SDK + OTLP/HTTP exporter;
# run from anywhere:  bash benchmarks/gpu_check.sh   (PYTHON=python3 to choose the interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python}
WORK=$(mktemp -d)
status=0
section() { echo; echo "=== $* ==="; }
fail() { echo "FAILED: $*"; status=1; }

section "environment"
nvidia-smi -L || echo "(no nvidia-smi)"
$PY - <<'EOF' || { echo "missing dependencies: stop"; exit 1; }
import torch, pynvml, opentelemetry.sdk.metrics, opentelemetry.exporter.otlp.proto.http  # noqa
from importlib.metadata import version
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), GPUs: {torch.cuda.device_count()}, "
      f"nvidia-ml-py {version('nvidia-ml-py')}, opentelemetry-sdk {version('opentelemetry-sdk')}")
assert torch.cuda.is_available(), "torch sees no GPU"
EOF
NGPU=$($PY -c "import torch; print(torch.cuda.device_count())")
NPROC=$(( NGPU >= 2 ? 2 : 1 ))

section "1. NvmlGpuReader: 5 samples, 1 s apart"
timeout 60 $PY - <<'EOF' || fail "NvmlGpuReader"
import time
from collector.metrics import GPU_METRICS
from trainer.gpu import NvmlGpuReader

reader = NvmlGpuReader()
devices = reader.devices()
assert devices, "NVML found no GPU"
for d in devices:
    print(f"GPU {d.index}: {d.name} {d.uuid}")
names = [m.name for m in GPU_METRICS]
missing: set[tuple[int, str]] = set()
for i in range(5):
    samples = reader.sample()
    assert len(samples) == len(devices), f"read {len(samples)} of {len(devices)} GPUs"
    for s in samples:
        missing |= {(s.index, n) for n in names if n not in s.values}
        if i in (0, 4):
            print(f"sample {i} GPU {s.index}: " + ", ".join(
                f"{n.removeprefix('gpu.')}={s.values[n]:.4g}" for n in names if n in s.values))
    time.sleep(1)
print("XID events seen:", reader.xids())
reader.close()
absent = {k: v for k, v in reader.unsupported.items()}
failing = sorted(missing - set(absent))
print(f"{len(names)} canonical metrics per GPU; not on this hardware (NVML says): "
      f"{absent or 'none'}; failing: {failing or 'none'}")
assert not failing, f"metrics failing: {failing}"
EOF

section "2. pytest -m gpu (real NVML)"
timeout 90 $PY -m pytest -q --noconftest -p no:cacheprovider -m gpu tests/trainer/test_gpu.py \
  || fail "pytest -m gpu"

section "3. example trainer on NCCL: $NPROC rank(s), collective timing, kernel profiles"
PORT=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
$PY - "$PORT" <<'EOF' &
# A local OTLP/HTTP sink: decodes every export and prints a summary when stopped.
import signal, sys
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

seen = defaultdict(list)  # (metric, attrs) -> values (histograms: sum/count)
def attrs(dp): return ",".join(f"{a.key}={str(a.value).split(':', 1)[1].strip()}" for a in dp.attributes)
class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        req = ExportMetricsServiceRequest.FromString(self.rfile.read(int(self.headers["content-length"])))
        for rm in req.resource_metrics:
            res = {a.key: str(a.value).split(":", 1)[1].strip() for a in rm.resource.attributes}
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    for dp in getattr(m, kind).data_points:
                        key = (m.name, f"node={res.get('node')},rank={res.get('rank')}," + attrs(dp))
                        if kind == "histogram":
                            if dp.count:
                                seen[key].append(dp.sum / dp.count)
                        else:
                            seen[key].append(getattr(dp, dp.WhichOneof("value")))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
def stop(*_): raise SystemExit
signal.signal(signal.SIGTERM, stop)
try:
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
finally:
    print(f"OTLP sink received {sum(map(len, seen.values()))} points in {len(seen)} series:")
    for (name, a), vs in sorted(seen.items()):
        if name == "train.kernel.duration" and vs[-1] < 1e-4:
            continue
        print(f"  {name:32s} {a[:110]:110s} n={len(vs):3d} last={vs[-1]:.6g}")
EOF
SINK=$!
sleep 2
timeout 150 $PY -m torch.distributed.run --nproc-per-node "$NPROC" -m trainer.example \
  --device cuda --steps 300 --d-model 1024 --layers 8 --heads 16 --seq-len 512 --batch-size 8 \
  --vocab 8192 --log-every 50 --endpoint "http://127.0.0.1:$PORT" --job gpu-check \
  --node-name "gpunode{rank}" --gpu nvml --export-interval 1 --profile-every 100 \
  --probe-interval 5 --result "$WORK/example-rank{rank}.json" || fail "example trainer"
sleep 1
kill -TERM "$SINK"; wait "$SINK"
$PY - "$WORK" <<'EOF' || fail "example results"
import json, pathlib, statistics, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("example-rank*.json")):
    r = json.loads(f.read_text())
    t = r["step_times_s"][20:]
    print(f"{f.name}: loss {r['first_loss']:.3f} -> {r['last_loss']:.3f}, median step "
          f"{1e3 * statistics.median(t):.2f} ms, hook {r['hook']}")
    assert r["hook"]["collectives_timed"] > 0 and r["hook"]["dropped_points"] == 0
    assert r["hook"]["errors"] == 0 and r["last_loss"] < r["first_loss"]
EOF

section "4. hook overhead on the GPU (interleaved with/without, median step-time ratio)"
timeout 170 $PY benchmarks/hook_overhead.py --device cuda --nproc "$NPROC" --blocks 60 \
  --steps-per-block 2 --gpu nvml -- --d-model 1024 --layers 8 --heads 16 --seq-len 512 \
  --batch-size 8 --vocab 8192 || fail "overhead benchmark"

section "done"
[ "$status" = 0 ] && echo "ALL GPU CHECKS PASSED" || echo "SOME GPU CHECKS FAILED"
rm -rf "$WORK"
exit $status
