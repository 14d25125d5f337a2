#!/usr/bin/env bash
# device demo (issue 35 item 2): .venv-runtime over the image's own torch, from carried wheels, then the backend on the GPU
set -u
W="$(cd "$(dirname "$0")" && pwd)"; cd "$W/repo"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c 'import sys, torch; print(sys.executable, torch.__version__, torch.__file__, torch.cuda.is_available())' | tee "$OUT/base.txt"
t0=$SECONDS
PYTHON=python3 LTS_WHEELS="$W/wheels" LTS_RUNTIME_SKIP=ray LTS_SKIP_SANDBOX_CHECK=1 bash setup.sh runtime --gpu-check > "$OUT/setup-runtime.log" 2>&1; echo "setup rc=$? in $((SECONDS - t0)) s" | tee -a "$OUT/setup-runtime.log"
cp .venv-runtime/setup-public-runtime.json "$OUT/" 2>/dev/null
# the protected check fails loudly when a protected package changes: a carried torch over the image's would do it
.venv-runtime/bin/python configure.py --force --device cuda --port 19210 --admin-port 18080 > "$OUT/configure.log" 2>&1; echo "configure rc=$?" >> "$OUT/configure.log"
( bash serve.sh backend > "$OUT/backend.log" 2>&1 & echo $! > /tmp/backend.pid )
for i in $(seq 120); do curl -sf http://127.0.0.1:19210/api/v1/healthz >/dev/null 2>&1 && break; sleep 1; done
KEY="$(python3 -c 'import yaml; c = yaml.safe_load(open("config/runtime.yaml")); k = c["backend"]["api_keys"][0]; print(k if isinstance(k, str) else k["key"])' 2>/dev/null)"
TINKER_API_KEY="$KEY" TINKER_BASE_URL=http://127.0.0.1:19210 timeout 180 .venv-runtime/bin/python - > "$OUT/sample.json" 2>"$OUT/sample.err" <<'PY'
import json, time, tinker, torch
from tinker import types
sc = tinker.ServiceClient().create_sampling_client(base_model="local/qwen3-tiny-xs")
t0 = time.time()
r = sc.sample(prompt=types.ModelInput.from_ints([10, 20, 30, 40]), num_samples=4,
              sampling_params=types.SamplingParams(max_tokens=16, temperature=1.0)).result()
print(json.dumps({"ok": True, "samples": [s.tokens for s in r.sequences], "seconds": round(time.time() - t0, 2),
                  "torch": torch.__version__, "torch_path": torch.__file__, "cuda": torch.cuda.is_available()}))
PY
echo "sample rc=$?" >> "$OUT/sample.err"
kill "$(cat /tmp/backend.pid)" 2>/dev/null; sleep 3
grep -i -m5 "device\|cuda" "$OUT/backend.log" > "$OUT/backend-device.txt"
nvidia-smi --query-gpu=name,memory.used --format=csv >> "$OUT/backend-device.txt" 2>&1
# protected-package check on the H200: a runtime whose extra requirement changes a protected package of the base fails loudly
cd "$W"; cp -r repo repo2; cd repo2; rm -rf .venv-runtime
SIXV="$(python3 -c 'import six; print(six.__version__)')"; OTHER=1.16.0; [[ "$SIXV" == 1.16.0 ]] && OTHER=1.17.0
echo "six==$OTHER" > /tmp/extra.txt
PYTHON=python3 LTS_WHEELS="$W/wheels" LTS_RUNTIME_SKIP=ray LTS_SKIP_SANDBOX_CHECK=1 LTS_SKIP_MODEL=1 LTS_PROTECTED_PACKAGES="torch triton six" \
  LTS_RUNTIME_EXTRA=/tmp/extra.txt bash setup.sh runtime > "$OUT/setup-protected.log" 2>&1; echo "protected-change setup rc=$? (base six $SIXV -> $OTHER)" | tee -a "$OUT/setup-protected.log"
cp .venv-runtime/setup-public-runtime.json "$OUT/setup-protected.json" 2>/dev/null
python3 -c 'import six; print("base six after:", six.__version__)' >> "$OUT/setup-protected.log"
