"""Backend overhead benchmark (issue 2, acceptance 5), on the embedded tiny model.

Prints, for the same work done (a) through the HTTP API with the official tinker SDK and
(b) by raw torch in this process:
  * forward_backward + optim_step tokens/s (wall) and tokens per CPU-second,
  * sampling tokens/s and tokens per CPU-second,
and the API round-trip latency of a trivial call. Targets: API >= 80 % of raw torch; round
trip < 10 ms. Both sides use one torch thread and OMP_WAIT_POLICY=PASSIVE.

    .venv-runtime/bin/python bench/bench_backend.py [--steps 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import tinker  # noqa: E402
import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from tinker import types  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache  # noqa: E402

from helpers import BackendProc, ensure_tiny_model  # noqa: E402

B, T, RANK, LR = 8, 256, 16, 1e-4
S_PROMPTS, S_SAMPLES, S_PROMPT_LEN, S_NEW = 8, 8, 32, 64


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_data(vocab: int):
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, min(vocab, 8000), size=T + 1) for _ in range(B)]
    prompts = [rng.integers(0, min(vocab, 8000), size=S_PROMPT_LEN).tolist() for _ in range(S_PROMPTS)]
    return seqs, prompts


# ----------------------------------------------------------------------------- raw torch
def raw_torch(model_path: Path, seqs, prompts, steps: int) -> dict:
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    for p in model.parameters():
        p.requires_grad_(False)
    torch.manual_seed(0)
    model = get_peft_model(model, LoraConfig(r=RANK, lora_alpha=32, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    ids = torch.tensor(np.stack([s[:-1] for s in seqs]))
    tgt = torch.tensor(np.stack([s[1:] for s in seqs]))

    def step():
        logits = model(input_ids=ids, use_cache=False).logits.float()
        lp = logits.gather(-1, tgt[..., None])[..., 0] - torch.logsumexp(logits, -1)
        (-lp).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    train = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "tokens": steps * B * T}

    model.eval()

    def sample():
        with torch.no_grad():
            x = torch.tensor([p for p in prompts for _ in range(S_SAMPLES)])
            cache = DynamicCache()
            out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
            for _ in range(S_NEW):
                probs = torch.softmax(out.logits[:, -1].float(), -1)
                nxt = torch.multinomial(probs, 1)
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)

    sample()
    c0, t0 = time.process_time(), time.perf_counter()
    sample()
    samp = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "tokens": S_PROMPTS * S_SAMPLES * S_NEW}
    return {"train": train, "sample": samp}


# ----------------------------------------------------------------------------- through the API
def through_api(backend: BackendProc, seqs, prompts, steps: int) -> dict:
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=backend.model, rank=RANK, seed=0)
    data = [types.Datum(model_input=types.ModelInput.from_ints(s[:-1].tolist()),
                        loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(s[1:].astype(np.int64))})
            for s in seqs]
    adam = types.AdamParams(learning_rate=LR, beta1=0.9, beta2=0.95, eps=1e-8)

    def step():
        f = tc.forward_backward(data, "cross_entropy")
        o = tc.optim_step(adam)
        f.result()
        o.result()

    step()
    pid = backend.proc.pid
    c0, t0 = proc_cpu(pid), time.perf_counter()
    for _ in range(steps):
        step()
    train = {"wall_s": time.perf_counter() - t0, "cpu_s": proc_cpu(pid) - c0, "tokens": steps * B * T}

    sampler = tc.save_weights_and_get_sampling_client()
    sp = types.SamplingParams(max_tokens=S_NEW, stop=[], temperature=1.0)

    def sample():
        futs = [sampler.sample(types.ModelInput.from_ints(p), S_SAMPLES, sp) for p in prompts]
        for f in futs:
            f.result()

    sample()
    c0, t0 = proc_cpu(pid), time.perf_counter()
    sample()
    samp = {"wall_s": time.perf_counter() - t0, "cpu_s": proc_cpu(pid) - c0, "tokens": S_PROMPTS * S_SAMPLES * S_NEW}

    # round trip of trivial calls, keep-alive client (as the SDK uses)
    lat = {}
    with httpx.Client(base_url=backend.url, headers={"X-API-Key": backend.key}) as c:
        for name, call in {"healthz": lambda: c.get("/api/v1/healthz"),
                           "get_info": lambda: c.post("/api/v1/get_info", json={"model_id": tc.model_id}),
                           "session_heartbeat": lambda: c.post("/api/v1/session_heartbeat",
                                                               json={"session_id": sc.holder.get_session_id()}),
                           }.items():
            for _ in range(20):
                call()
            ts = []
            for _ in range(200):
                t = time.perf_counter()
                r = call()
                ts.append((time.perf_counter() - t) * 1e3)
                assert r.status_code == 200, r.text
            lat[name] = {"p50_ms": statistics.median(ts), "p95_ms": sorted(ts)[int(0.95 * len(ts))]}
    return {"train": train, "sample": samp, "latency": lat}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch-window", type=float, default=0.02, help="backend.batch_window_s (default 0.02)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    os.environ.setdefault("HF_HOME", str(ROOT / "hf-home"))
    name, path = ensure_tiny_model()

    seqs, prompts = make_data(AutoConfig.from_pretrained(str(path)).vocab_size)
    with tempfile.TemporaryDirectory() as td:
        backend = BackendProc(Path(td), extra={"backend": {"batch_window_s": args.batch_window}}).start()
        try:
            api = through_api(backend, seqs, prompts, args.steps)
        finally:
            backend.stop()
    raw = raw_torch(path, seqs, prompts, args.steps)
    rows = []
    res = {"model": name, "workload": {"train": f"{B}x{T} tokens, LoRA r{RANK}, fwd_bwd+optim x{args.steps}",
                                        "sample": f"{S_PROMPTS} prompts x {S_SAMPLES} samples, {S_PROMPT_LEN}+{S_NEW} "
                                                  "tokens"}}
    for kind in ("train", "sample"):
        a, r = api[kind], raw[kind]
        row = {"api_tok_s": a["tokens"] / a["wall_s"], "raw_tok_s": r["tokens"] / r["wall_s"],
               "api_tok_per_cpu_s": a["tokens"] / max(a["cpu_s"], 1e-9),
               "raw_tok_per_cpu_s": r["tokens"] / max(r["cpu_s"], 1e-9)}
        row["ratio_wall"] = row["api_tok_s"] / row["raw_tok_s"]
        row["ratio_cpu"] = row["api_tok_per_cpu_s"] / row["raw_tok_per_cpu_s"]
        res[kind] = row
        rows.append((kind, row))
    res["latency"] = api["latency"]
    print(f"model {name}; workloads: {res['workload']}")
    print(f"{'work':8} {'API tok/s':>10} {'raw tok/s':>10} {'ratio':>6} | {'API tok/CPU-s':>13} {'raw tok/CPU-s':>13} "
          f"{'ratio':>6}")
    for kind, r in rows:
        print(f"{kind:8} {r['api_tok_s']:10.0f} {r['raw_tok_s']:10.0f} {r['ratio_wall']:6.2f} | "
              f"{r['api_tok_per_cpu_s']:13.0f} {r['raw_tok_per_cpu_s']:13.0f} {r['ratio_cpu']:6.2f}")
    for k, v in api["latency"].items():
        print(f"round trip {k:18} p50 {v['p50_ms']:.2f} ms   p95 {v['p95_ms']:.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
