#!/usr/bin/env bash
# Build, here, what bench_gpu_vllm.py needs on the device (torch 2.11.0+cu130, Python 3.12, no network),
# in parts that fit the device tool's 64 MiB a call (docs/performance.md, "seventh session"):
#   .carry/vA/xzpart.0, .carry/vB/{xzpart.1,deps.tar}, .carry/vx/apache_tvm_ffi-*.whl
# vllm 0.26.0 is the newest release pinning torch==2.11.0 (its extensions link libcudart.so.13). It is
# slimmed to what an H200 running dense models needs: FA2, MoE, FlashMLA, qutlass, the Rust frontend and the
# other Pythons' DeepGEMM bindings are left out (324 MB unpacked, ~71 MB xz).
# On the device: call 1 copies vA to /tmp/v; call 2 copies vB, unpacks into /tmp/vsite and pip-installs the
# dependency wheels there (--no-deps --target); later calls export PYTHONPATH=/tmp/site:/tmp/vsite:$PWD.
set -euo pipefail
W=${W:-/tmp/vllm_build}; ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
      --platform manylinux_2_35_x86_64 --platform manylinux1_x86_64)
mkdir -p "$W/deps" && cd "$W"
PIP_CONSTRAINT="" python3 -m pip download -q --no-deps "${PLAT[@]}" -d . vllm==0.26.0
# The dependency closure without what the device has or what a dense model on Hopper does not import.
printf '%s\n' torch torchaudio torchvision torchcodec PyNvVideoCodec flashinfer-python flashinfer-cubin apache-tvm-ffi \
  tilelang nvidia-cutlass-dsl quack-kernels tokenspeed-mla humming-kernels nvidia-cudnn-frontend numba \
  opencv-python-headless triton | sed "s/\$/; sys_platform == 'never'/" > overrides.txt
echo vllm==0.26.0 > in.txt
uv pip compile in.txt --override overrides.txt --python-version 3.12 --python-platform x86_64-manylinux_2_28 \
  --index-url https://pypi.org/simple --no-header --no-annotate -o lock.txt
# Leave out what the device image has (KINDS.md's list), what .whl/ carries, and the server-only extras.
grep -v -i -E '^(vllm|numpy|transformers|tokenizers|safetensors|huggingface-hub|hf-xet|regex|requests|tqdm|psutil|pyyaml|pillow|jinja2|markupsafe|filelock|fsspec|packaging|protobuf|grpcio|aiohttp|aiohappyeyeballs|aiosignal|attrs|frozenlist|multidict|yarl|propcache|anyio|idna|certifi|charset-normalizer|urllib3|h11|httpcore|httpx|click|cloudpickle|einops|ninja|prometheus-client|py-cpuinfo|pygments|rich|markdown-it-py|mdurl|sentencepiece|setuptools|shellingham|six|tiktoken|typer|typing-extensions|uvloop|pydantic|pydantic-core|annotated-types|annotated-doc|fastapi|starlette|uvicorn|sniffio|typing-inspection|opentelemetry-api|cryptography|sentry-sdk|fastapi-cloud-cli|fastapi-cli|rignore|fastar|supervisor|cffi|pycparser|pyjwt|truststore|agent-detector|detect-installer|rich-toolkit|httptools|watchfiles|websockets|python-multipart|email-validator|dnspython|python-dotenv)==' lock.txt > carry.txt
PIP_CONSTRAINT="" python3 -m pip download -q --no-deps "${PLAT[@]}" -d deps -r carry.txt
rm -rf full && mkdir full && (cd full && unzip -q ../vllm-0.26.0-*.whl)
rm -f full/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so full/vllm/_moe_C_stable_libtorch.abi3.so full/vllm/_qutlass_C.abi3.so \
  full/vllm/_flashmla_C.abi3.so full/vllm/_flashmla_extension_C.abi3.so full/vllm/vllm-rs \
  full/vllm/third_party/deep_gemm/_C.cpython-3{10,11,13,14}-x86_64-linux-gnu.so
tar -cf - -C full . | xz -9e -T2 > vllm_slim.tar.xz
tar -cf deps.tar deps
split -b 56000000 -d -a 1 vllm_slim.tar.xz xzpart.
mkdir -p "$ROOT/.carry/vA" "$ROOT/.carry/vB" "$ROOT/.carry/vx"
cp xzpart.0 "$ROOT/.carry/vA/"; cp xzpart.1 deps.tar "$ROOT/.carry/vB/"
# xgrammar 0.2.9 needs apache-tvm-ffi >= 0.1.11 (vllm's 0.1.10 pin is for flashinfer, not carried)
PIP_CONSTRAINT="" python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$ROOT/.carry/vx" apache-tvm-ffi==0.1.11
du -sb "$ROOT/.carry/vA" "$ROOT/.carry/vB" "$ROOT/.carry/vx"
