"""Training throughput and MFU of the runtime (Runtime.forward_backward + optim_step, no HTTP) next
to plain HF + PyTorch AdamW, on random-init Qwen3-shaped models, sequence length 2048.

    python3 bench/bench_gpu_training.py [--shapes 0.6b,4b] [--batch 8] [--json out.jsonl] [--profile prof.txt]

MFU = 6 * N * tokens/s / 989e12 (N = all parameters, the datasheet dense bf16 rate; attention FLOPs not
counted). Configurations (each: 1 warm-up step, then --steps timed steps of batch x 2048 tokens):
  hf_plain        model(ids).logits -> float32 cross-entropy -> backward -> torch.optim.AdamW (foreach)
  runtime         the backend's path: token-count micro-batches, chunked lm_head + float32 log-softmax,
                  fused AdamW; with and without gradient checkpointing
  *_lora          rank-32 LoRA on all linear layers incl. lm_head (peft), same paths
  ...:liger       with Liger's fused RMSNorm/rotary/SwiGLU (services/backend/gpu/train_kernels.py; the
                  patch is process-wide, so list these configs last)
  ...:fp32lora    peft's float32 LoRA branches (the runtime's default before gpu/logprobs.bf16_lora)
  ...:grpo        bench_gpu_grpo_step's data instead (128 x (43 + 512) tokens, importance_sampling)
"""

from __future__ import annotations

import argparse
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from bench_gpu_common import DEV, PEAK_BF16, Results, env_info, free_cuda, make_model, n_params, sync
from torch.profiler import ProfilerActivity, profile

from services.backend.codec import Datum, FwdBwdRequest
from services.backend.gpu import logprobs as gpu_logprobs
from services.backend.gpu import train_kernels
from services.backend.models import BaseModel, TrainableModel, enable_grad_ckpt
from services.backend.runtime import Runtime
from services.backend.runtime_api import ModelInfo, TrainConfig

T = 2048
ADAM = dict(learning_rate=1e-6, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=1.0)


def data(batch: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, min(vocab, 150000), size=T + 1) for _ in range(batch)]


def peak_gb() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def run_steps(step, steps: int) -> float:
    step()  # warm-up (allocator, cuBLAS, optimizer state)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t0) / steps


def hf_plain(model, seqs, lora: bool, gc: bool):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    ids = torch.tensor(np.stack([s[:-1] for s in seqs]), device=DEV)
    tgt = torch.tensor(np.stack([s[1:] for s in seqs]), device=DEV)
    if gc:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    model.train(gc)

    def step():
        logits = model(input_ids=ids, use_cache=False).logits
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, opt


def make_runtime(model, name: str, gc: bool, mb_tokens: int, tmp: str) -> Runtime:
    rt = Runtime([], Path(tmp), device=DEV, dtype="bfloat16", max_tokens_per_microbatch=mb_tokens, sampler="hf",
                 gradient_checkpointing=False, training_kernels="none")  # the configs apply Liger themselves
    base = object.__new__(BaseModel)
    base.name, base.path, base.device, base.dtype, base.tokenizer = name, "", torch.device(DEV), torch.bfloat16, None
    base.hf, base.peft, base.active_adapter = model, None, None
    base.info = ModelInfo(name, model.config.vocab_size, 32768, [151645])
    rt.bases[name] = base
    rt.gradient_checkpointing = gc
    if gc:
        enable_grad_ckpt(model)
    else:
        model.gradient_checkpointing_disable()
    return rt


def grpo_data(groups: int = 16, group_size: int = 8, prompt: int = 43, new: int = 512, seed: int = 0):
    """Datums shaped like bench_gpu_grpo_step's: groups x group_size sequences of a 43-token prompt
    + 512 sampled tokens, importance_sampling inputs (sampled logprobs, group-normalised advantages,
    zero on the prompt)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(groups):
        p = rng.integers(0, 150000, size=prompt)
        adv = rng.normal(size=group_size)
        adv = (adv - adv.mean()) / (adv.std() + 1e-6)
        for a in adv:
            toks = np.concatenate([p, rng.integers(0, 150000, size=new)]).astype(np.int64)
            lps = np.concatenate([np.zeros(prompt - 1), rng.uniform(-3, 0, size=new)]).astype(np.float32)
            advs = np.concatenate([np.zeros(prompt - 1), np.full(new, a)]).astype(np.float32)
            out.append(Datum(toks[:-1], {"target_tokens": toks[1:], "logprobs": lps, "advantages": advs}))
    return out


def runtime_step(rt: Runtime, model, name: str, seqs, lora: bool, grpo: bool = False):
    if lora:
        tm = rt.create_model("m", TrainConfig(name, rank=32, seed=0))
    else:
        params = list(model.parameters())
        for p in params:
            p.requires_grad_(True)
        tm = TrainableModel("m", TrainConfig(name, rank=0), None, model, rt._make_optimizer(params), params)
        rt.trainables["m"] = tm
    reqdata = [Datum(s[:-1].astype(np.int64), {"target_tokens": s[1:].astype(np.int64),
                                               "weights": np.ones(T, np.float32)}) for s in seqs]
    loss = "cross_entropy"
    if grpo:
        reqdata, loss = grpo_data(), "importance_sampling"
    seq = [0]

    def step():
        seq[0] += 1
        rt.forward_backward(FwdBwdRequest("m", seq[0], loss, {}, False, reqdata))
        rt.optim_step("m", ADAM)

    return step, tm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="0.6b,4b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--configs", default="hf_plain:gc,runtime:gc:16384,runtime:nogc:4096,runtime:nogc:8192,"
                                         "runtime_lora:nogc:8192,runtime_lora:gc:16384,hf_plain_lora:gc,runtime:nogc:8192:liger,"
                                         "runtime:gc:16384:liger,runtime_lora:nogc:8192:liger")
    ap.add_argument("--seq", type=int, default=T)
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", default=None, help="write a torch.profiler table of one step of --profile-config")
    ap.add_argument("--profile-config", default="4b/runtime:nogc:8192:liger")
    a = ap.parse_args()
    globals()["T"] = a.seq
    R = Results(a.json)
    R.add(bench="env", **env_info())
    for name in a.shapes.split(","):
        seqs = data(a.batch, 151936)
        model = make_model(name)
        N = n_params(model)
        for cfg in a.configs.split(","):
            parts = cfg.split(":")
            kind, gc = parts[0], parts[1] == "gc"
            mb = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else a.batch * T
            liger = "liger" in parts[1:]
            lora = kind.endswith("_lora")
            # the baseline of gpu/logprobs.bf16_lora: peft's float32 LoRA branches
            gpu_logprobs.LORA_BF16 = "fp32lora" not in parts[1:]
            free_cuda()
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    # in place and process-wide (Liger patches HF's Qwen3 classes): configs after it get it too
                    if liger:
                        train_kernels.apply(model, "liger", True)
                    if kind.startswith("hf_plain"):
                        if lora:
                            # peft: the runtime venv and the device only
                            from peft import LoraConfig, get_peft_model  # noqa: PLC0415

                            for p in model.parameters():
                                p.requires_grad_(False)
                            targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                       "lm_head"]
                            model = get_peft_model(model, LoraConfig(r=32, lora_alpha=32, target_modules=targets))
                        else:
                            for p in model.parameters():
                                p.requires_grad_(True)
                        step, opt = hf_plain(model, seqs, lora, gc)
                        holder = opt
                    else:
                        rt = make_runtime(model, name, gc, mb, tmp)
                        step, holder = runtime_step(rt, model, name, seqs, lora, "grpo" in parts[1:])
                    dt = run_steps(step, a.steps)
                    n_tok = sum(len(d.tokens) for d in grpo_data()) if "grpo" in parts[1:] else a.batch * T
                    tok_s = n_tok / dt
                    R.add(bench="training", shape=name, config=cfg, lora=lora, grad_ckpt=gc, microbatch_tokens=mb,
                          liger=liger, params=N, tokens_per_step=n_tok, step_s=dt, tok_s=tok_s,
                          mfu_6N=6 * N * tok_s / PEAK_BF16, peak_gb=peak_gb())
                    if a.profile and f"{name}/{cfg}" == a.profile_config:
                        t0 = time.perf_counter()
                        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                            step()
                            sync()
                        wall = time.perf_counter() - t0
                        # GPU busy time (kernels and copies) against the step's wall time: a large gap is host-bound
                        busy = sum(ev.device_time_total for ev in prof.events()
                                   if ev.device_type == torch.autograd.DeviceType.CUDA) / 1e6
                        tab = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=45)
                        head = f"{name} {cfg} step {dt:.3f}s; profiled step {wall:.3f}s wall, GPU busy {busy:.3f}s"
                        R.add(bench="training_profile", shape=name, config=cfg, step_s=dt, profiled_wall_s=wall,
                              gpu_busy_s=busy)
                        Path(a.profile).write_text(f"{head}\n{tab}\n")
                        print(head)
                        print(tab[:7000])
                    del step, holder
                    if not kind.startswith("hf_plain"):
                        rt.trainables.clear()
                        del rt
            except Exception as ex:  # noqa: BLE001
                traceback.print_exc()
                R.add(bench="error", shape=name, config=cfg, error=f"{type(ex).__name__}: {ex}"[:400],
                      peak_gb=peak_gb())
            for p in model.parameters():
                p.grad = None
            if lora:  # peft wrapped the model in place: continue with a fresh one
                del model
                free_cuda()
                model = make_model(name)
        del model
        free_cuda()
    print("\n== training summary ==")
    for r in R.rows:
        if r.get("bench") in ("training", "error"):
            print({k: v for k, v in r.items() if k not in ("bench", "params")})


if __name__ == "__main__":
    main()
