"""Fast sampling engine for GPUs, in torch alone (no vLLM).

* ``qwen3.py``     a minimal Qwen3 / Llama forward (RMSNorm, rotary, GQA attention over a static
                   per-slot KV cache, SwiGLU MLP) whose weights are copied from an HF module;
                   the decode step has static shapes so it can be captured in CUDA graphs.
* ``weights.py``   reads (and merges) weights from an HF Qwen3 or Llama module, a peft-wrapped one with a
                   LoRA adapter (merged into bf16 copies), or a full fine-tuned copy.
* ``sampling.py``  batched token choice (temperature, top-k, top-p, greedy) with a counter-based
                   random stream per sequence, so a seed gives the same tokens whatever the batch;
                   on CUDA without top-k/top-p, the same choice in two Triton launches (``choose_kernel``).
* ``engine.py``    ``StaticEngine``: slots, prefill (one per distinct prompt, KV copied to the
                   ``num_samples`` slots), continuous batching of the decode loop across requests,
                   stop tokens/strings, per-token logprobs, CUDA graphs per (batch, context) bucket,
                   and (on CUDA) torch.compile of the elementwise pieces between the matmuls.
* ``decode_attention.py``  the split-K Triton decode attention (each row read to its own length, the
                   KV write fused in); ``skinny_gemm.py`` the split-K Triton GEMMs of the decode step: up to 16
                   rows ``mm``, 17-64 rows on Hopper ``mm_tma`` through TMA descriptors (cuBLAS elsewhere), the
                   gate/up ones with SiLU * up in their epilogue; ``decode_pieces.py`` that layer's q/k-norm +
                   rotary and residual-add + RMSNorm pieces as single Triton launches.
* ``train_kernels.py``  Liger's fused RMSNorm/rotary/SwiGLU for training (``engine.training_kernels``).
* ``logprobs.py``  training-side per-token logprobs with lm_head + float32 log-softmax chunked under
                   checkpointing (memory bounded with a 151,936-token vocabulary), and peft's LoRA
                   branches in bf16 on CUDA (``bf16_lora``).

What ``Runtime.sample`` calls is the engine adapter ``services/backend/engines/static.py`` (``StaticSampling``: an
engine per base model, weights loading, sizing from ``engine.sampler_options``, HF fallback for requests longer than
the static cache), one of the sampling engines of ``services/backend/engines``.

Figures and commands: docs/performance.md.

Importing this package never touches CUDA: everything runs (eagerly, without graphs) on CPU too,
which is what the CPU tests use.
"""
