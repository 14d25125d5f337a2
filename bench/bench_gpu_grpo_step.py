"""A GRPO-like step through the HTTP API (official tinker SDK) on a random-init Qwen3-shaped model
(--shape 0.6b or 4b), with the built-in micro tasks' instructions as prompts; prints the time
breakdown (publish = save_weights_and_get_sampling_client, sample, forward_backward, optim_step),
tokens/s and the GPU memory in use after each step (growth over the steps = a leak).

    python3 bench/bench_gpu_grpo_step.py --tokenizer-dir DIR [--shape 4b] [--rank 32|0] [--groups 16]
        [--group-size 8] [--steps 10]

--rank 0 is full fine-tuning (its sampler snapshots share the trainer's weights until optim_step).
The backend runs with the generated GPU config's training settings (gradient checkpointing,
16384-token micro-batches).

DIR holds a full-vocabulary Qwen tokenizer (tokenizer.json[.gz], tokenizer_config.json,
chat_template.jinja: ``python -m services.models make-tiny --vocab full`` writes one). The script saves
the model to a temporary directory, starts ``python -m services.backend`` on it (device cuda, bf16, the
static sampler), and per step: save_weights_and_get_sampling_client -> sample groups x group-size
completions -> group-normalised advantages from a stub reward (no sandbox: the verifier's time is not
part of this) -> forward_backward(importance_sampling) -> optim_step.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import tinker
import torch
import yaml
from bench_gpu_common import DEV, ROOT, Results, env_info, make_model
from tinker import types
from transformers import AutoTokenizer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model_dir(out: Path, tok_dir: Path, shape: str) -> None:
    model = make_model(shape)
    model.save_pretrained(str(out))
    del model

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    for f in ("tokenizer_config.json", "chat_template.jinja"):
        if (tok_dir / f).exists():
            shutil.copy(tok_dir / f, out / f)
    if (tok_dir / "tokenizer.json.gz").exists():
        (out / "tokenizer.json").write_bytes(gzip.decompress((tok_dir / "tokenizer.json.gz").read_bytes()))
    else:
        shutil.copy(tok_dir / "tokenizer.json", out / "tokenizer.json")


# engine.ray for one GPU: 1 trainer rank + 1 sampler replica sharing it (docs/ray.md)
RAY_ONE_GPU = {"address": "local", "trainers": 1, "samplers": 1, "num_cpus": 4,
               "resources": {"trainer": {"CPU": 1, "GPU": 0.5}, "sampler": {"CPU": 1, "GPU": 0.5}}}


def start_backend(model_dir: Path, state: Path, port: int, key: str, name: str, extra: dict,
                  tokenizer_id: str | None = None, env_extra: dict | None = None) -> subprocess.Popen:
    cfg = {"backend": {"host": "127.0.0.1", "port": port, "api_keys": [key], "state_dir": str(state),
                       "log_file": str(state / "backend.log"), "batch_window_s": extra.pop("batch_window_s", 0.002),
                       "log_level": extra.pop("log_level", "INFO")},
           "runtime": {"device": DEV, "dtype": "bfloat16" if DEV.startswith("cuda") else "float32", "threads": 4,
                       "models": [{"name": name, "path": str(model_dir),
                                   "tokenizer_id": tokenizer_id or str(model_dir)}],
                       **extra}}
    state.mkdir(parents=True, exist_ok=True)
    (state / "runtime.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(env_extra or {}))
    proc = subprocess.Popen([sys.executable, "-m", "services.backend", "--config", str(state / "runtime.yaml")],
                            cwd=ROOT,
                            env=env, stdout=open(state / "stdout.log", "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((state / "stdout.log").read_text()[-3000:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("backend did not come up")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def gpu_used_gb() -> float | None:
    """Memory in use on the whole GPU (the backend process included), GB."""
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 1e9


def prompts(tok, n: int) -> list[list[int]]:
    tasks = sorted((ROOT / "datasets" / "micro").glob("*/instruction.md"))
    out = []
    for i in range(n):
        text = tasks[i % len(tasks)].read_text()
        msgs = [{"role": "user", "content": text}]
        try:
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        except Exception:  # noqa: BLE001
            ids = tok.encode(text)
        out.append([int(x) for x in ids])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--shape", default="0.6b")
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rank", type=int, default=32, help="LoRA rank; 0 = full fine-tuning")
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--no-grad-ckpt", action="store_true")
    ap.add_argument("--max-sampler-snapshots", type=int, default=4,
                    help="sampler snapshots kept (each LoRA one holds an adapter, each full-FT one a model copy)")
    ap.add_argument("--model-dir", default=None,
                    help="build the random-init model here once and reuse it (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep-log", default=None, help="copy the backend log here")
    ap.add_argument("--log-level", default="INFO",
                    help="the backend's (DEBUG: each job's duration and the largest live CUDA tensors per "
                         "sampling round)")
    ap.add_argument("--ray", action="store_true", help="engine.ray: 1 trainer rank + 1 sampler replica on the one GPU")
    ap.add_argument("--alloc-conf", default=None, help="PYTORCH_CUDA_ALLOC_CONF for the backend process")
    ap.add_argument("--training-kernels", default="auto", help="engine.training_kernels: auto (Liger on CUDA) | none")
    ap.add_argument("--sampler", default="auto", help="engine.sampler: auto (the static engine on CUDA) | vllm | hf")
    ap.add_argument("--sampler-options", default="{}", help="JSON merged into engine.sampler_options")
    a = ap.parse_args()
    R = Results(a.json)
    R.add(bench="env", **env_info())

    tmp = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    name, key, port = f"local/qwen3-{a.shape}-like", "tml-bench", free_port()
    t0 = time.perf_counter()
    model_dir = Path(a.model_dir) if a.model_dir else tmp / "model"
    if not (model_dir / "config.json").exists():
        build_model_dir(model_dir, Path(a.tokenizer_dir), a.shape)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ps = prompts(tok, a.groups)
    proc = start_backend(model_dir, tmp / "state", port, key, name,
                         {"sampler": a.sampler,
                          "sampler_options": {"max_slots": a.groups * a.group_size, "max_context": 2048,
                                              **json.loads(a.sampler_options)},
                          "gradient_checkpointing": not a.no_grad_ckpt,
                          "max_tokens_per_microbatch": a.micro_batch_tokens,
                          "max_sampler_snapshots": a.max_sampler_snapshots, "training_kernels": a.training_kernels,
                          "batch_window_s": 0.05, "log_level": a.log_level, **({"ray": RAY_ONE_GPU} if a.ray else {})},
                         env_extra={"PYTORCH_CUDA_ALLOC_CONF": a.alloc_conf} if a.alloc_conf else None)
    R.add(bench="grpo_setup", startup_s=time.perf_counter() - t0,
          prompt_tokens_mean=float(np.mean([len(p) for p in ps])))
    try:
        sc = tinker.ServiceClient(base_url=f"http://127.0.0.1:{port}", api_key=key)
        tc = sc.create_lora_training_client(base_model=name, rank=a.rank, seed=0)
        rng = np.random.default_rng(0)
        for step in range(a.steps):
            T0 = time.perf_counter()
            samp = tc.save_weights_and_get_sampling_client()
            T1 = time.perf_counter()
            sp = types.SamplingParams(max_tokens=a.max_tokens, temperature=1.0)
            futs = [samp.sample(types.ModelInput.from_ints(p), a.group_size, sp) for p in ps]
            res = [f.result() for f in futs]
            T2 = time.perf_counter()
            data, n_sampled, n_train = [], 0, 0
            for p, r in zip(ps, res):
                rewards = np.array([len(s.tokens) % 7 + rng.normal() for s in r.sequences], dtype=np.float32)
                adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
                for s, av in zip(r.sequences, adv):
                    toks = p + list(s.tokens)
                    n_sampled += len(s.tokens)
                    n_train += len(toks) - 1
                    tgt = toks[1:]
                    lps = [0.0] * (len(p) - 1) + list(s.logprobs)
                    advs = [0.0] * (len(p) - 1) + [float(av)] * len(s.tokens)
                    data.append(types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]), loss_fn_inputs={
                        "target_tokens": types.TensorData.from_numpy(np.asarray(tgt, np.int64)),
                        "logprobs": types.TensorData.from_numpy(np.asarray(lps, np.float32)),
                        "advantages": types.TensorData.from_numpy(np.asarray(advs, np.float32))}))
            T3 = time.perf_counter()
            fb = tc.forward_backward(data, "importance_sampling")
            op = tc.optim_step(types.AdamParams(learning_rate=1e-5))
            fb.result()
            T4 = time.perf_counter()
            op.result()
            T5 = time.perf_counter()
            R.add(bench="grpo_step", shape=a.shape, rank=a.rank, step=step, ray=a.ray, alloc_conf=a.alloc_conf,
                  training_kernels=a.training_kernels, groups=a.groups, group_size=a.group_size,
                  sampled_tokens=n_sampled, gpu_used_gb=gpu_used_gb(),
                  train_tokens=n_train, save_weights_s=T1 - T0, sample_s=T2 - T1, build_data_s=T3 - T2,
                  forward_backward_s=T4 - T3, optim_step_s=T5 - T4, total_s=T5 - T0,
                  sample_tok_s=n_sampled / (T2 - T1), train_tok_s=n_train / (T4 - T3),
                  sample_frac=(T2 - T1) / (T5 - T0))
    finally:
        stop(proc)
        if a.keep_log:
            shutil.copy(tmp / "state" / "backend.log", a.keep_log)
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n== grpo summary ==")
    for r in R.rows:
        if r.get("bench", "").startswith("grpo"):
            print(json.dumps(r))


if __name__ == "__main__":
    main()
