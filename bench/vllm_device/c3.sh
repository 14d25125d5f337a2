set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:/tmp/vsite:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_USE_FLASHINFER_SAMPLER=0
cd bench
echo "== qwen3"; timeout ${T1:-330} python3 bench_gpu_vllm.py --tokenizer-dir ../.carry/tok --arch qwen3 --static --json $OUT/vllm.jsonl > $OUT/vllm_qwen3.log 2>&1; echo "rc $?"
grep -E "^RESULT|Error|error" $OUT/vllm_qwen3.log | grep -v '"bench": "env"' | cut -c1-420 | tail -30
echo "== llama"; timeout ${T2:-200} python3 bench_gpu_vllm.py --tokenizer-dir ../.carry/tok --arch llama --json $OUT/vllm.jsonl > $OUT/vllm_llama.log 2>&1; echo "rc $?"
grep -E "^RESULT|Error" $OUT/vllm_llama.log | grep -v '"bench": "env"' | cut -c1-420 | tail -16
