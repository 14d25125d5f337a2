set -o pipefail
export PYTHONPATH=/tmp/site:/tmp/vsite:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_USE_FLASHINFER_SAMPLER=0
echo "== check"; CHECK_SAMPLER_OPTIONS='{"gpu_memory_utilization": 0.15, "enforce_eager": true, "attention_config": {"backend": "TRITON_ATTN"}}' timeout 200 python3 tests/gpu/runtime_static_check.py cuda bfloat16 0.2 vllm > $OUT/check_vllm.log 2>&1; echo "rc $?"; grep -v Loading $OUT/check_vllm.log | grep -E "OK|Error|assert|Traceback" | tail -8
cd bench
echo "== grpo"; timeout -s INT -k 30 ${T3:-260} python3 bench_gpu_grpo_step.py --tokenizer-dir ../.carry/tok --shape 0.6b --rank 32 --steps 4 --sampler vllm --json $OUT/grpo_vllm.jsonl --keep-log $OUT/grpo_vllm_backend.log 2>&1 | grep -v Loading | tail -12
