mkdir -p /tmp/v && cp .carry/vA/xzpart.0 /tmp/v/ && ls -la /tmp/v && df -h /tmp | tail -1
command -v xz zstd; python3 -V; nvidia-smi -L
python3 -m pip list 2>/dev/null | grep -i -E "^(torch|transformers|huggingface.hub|protobuf|numpy|tokenizers|triton|pydantic|numba|opencv|safetensors) " 
