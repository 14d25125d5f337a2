set -o pipefail
mkdir -p /tmp/vsite /tmp/vdeps && cp .carry/vB/xzpart.1 /tmp/v/
cat /tmp/v/xzpart.0 /tmp/v/xzpart.1 | sha256sum
t0=$(date +%s)
if command -v xz >/dev/null; then cat /tmp/v/xzpart.0 /tmp/v/xzpart.1 | xz -d -T8 | tar -x -C /tmp/vsite
else cat /tmp/v/xzpart.0 /tmp/v/xzpart.1 | python3 -c "import lzma,tarfile,sys; tarfile.open(fileobj=lzma.open(sys.stdin.buffer), mode='r|').extractall('/tmp/vsite')"; fi
echo "extract $(( $(date +%s) - t0 ))s"; du -sh /tmp/vsite
tar -xf .carry/vB/deps.tar -C /tmp/vdeps && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/vsite /tmp/vdeps/deps/*.whl 2>&1 | tail -3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/vx .carry/vx/*.whl && cp -r /tmp/vx/* /tmp/vsite/
export PYTHONPATH=/tmp/vsite VLLM_ENABLE_V1_MULTIPROCESSING=0  # the import check below also needs .whl's pydantic (/tmp/site, call 3)
python3 -c "
import time; t=time.time()
import vllm
from vllm import LLM, SamplingParams
print('vllm', vllm.__version__, 'import ok %.1fs' % (time.time()-t))
import vllm._C_stable_libtorch
print('_C ok')
from vllm.vllm_flash_attn import flash_attn_interface as f
print('fa', {k: getattr(f, k) for k in dir(f) if 'AVAILABLE' in k or 'REASON' in k})
" 2>&1 | grep -v "^INFO" | tail -20
