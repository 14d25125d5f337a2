#!/usr/bin/env bash
# Device-side driver for the GPU benchmarks (see docs/performance.md). Run from the repo root on the
# GPU machine, with the wheels of .whl/ installed to /tmp/site (fastapi, uvicorn, tinker, ...).
#   bash bench/bench_gpu_run.sh kernels|sampling|training|check|conformance|grpo ...   (results under $OUT)
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HOME=$PWD/hf-home HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
for phase in "$@"; do
  t0=$(date +%s)
  case $phase in
    kernels) timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_attention.py 2>&1 | tail -5 | tee "$OUT/kernels.txt" ;;
    check) timeout 120 python3 tests/gpu/runtime_static_check.py cuda bfloat16 0.2 2>&1 | grep -v Loading | tail -4 | tee "$OUT/check.txt" ;;
    sampling) (cd bench && timeout ${SAMPLING_T:-330} python3 bench_gpu_sampling.py --shapes ${SHAPES:-4b,0.6b} --json "$OUT/sampling.jsonl" ${SAMPLING_ARGS}) 2>&1 | grep -v Loading | tee "$OUT/sampling.log" | grep -v "^RESULT" | tail -40 ;;
    training) (cd bench && timeout ${TRAINING_T:-220} python3 bench_gpu_training.py --shapes ${SHAPES:-4b,0.6b} --json "$OUT/training.jsonl" --profile "$OUT/profile.txt" ${TRAINING_ARGS}) 2>&1 | grep -v Loading | tee "$OUT/training.log" | grep -v "^RESULT" | grep -v "^ " | tail -25 ;;
    conformance) (cd bench && timeout -s INT -k 30 ${CONFORMANCE_T:-300} python3 bench_gpu_conformance.py --log "$OUT/conformance.txt" --backend-log "$OUT/conformance_backend.log") 2>&1 | tail -12 ;;
    grpo) (cd bench && timeout -s INT -k 30 ${GRPO_T:-240} python3 bench_gpu_grpo_step.py --tokenizer-dir ../.carry --json "$OUT/grpo.jsonl" --keep-log "$OUT/grpo_backend.log" ${GRPO_ARGS}) 2>&1 | grep -v Loading | tail -12 ;;
  esac
  echo "== $phase took $(( $(date +%s) - t0 ))s"
done
