"""services/backend/logprobs.available_bytes on CUDA counts what PyTorch's caching allocator holds without using
it: memory a finished micro-batch freed is free to the next one, though the driver does not report it as free
(counted as used, it cut a 4B model's 8192-token micro-batches on an H200 to 5314 tokens; docs/performance.md).
Skipped without CUDA (the device machine runs it: ``python3 -m pytest tests/gpu/test_memory_cap.py``)."""

from __future__ import annotations

import pytest
import torch

from services.backend import logprobs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cached_blocks_count_as_available():
    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    before = logprobs.available_bytes(dev)
    x = torch.empty(4 << 30, dtype=torch.uint8, device=dev)   # 4 GiB, then freed into the allocator's cache
    del x
    assert torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev) >= 4 << 30
    after = logprobs.available_bytes(dev)
    assert abs(after - before) < 256 << 20, (before, after)   # the driver alone would report 4 GiB less
