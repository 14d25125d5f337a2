"""configure.py's GPU defaults: forward_backward micro-batches of 65,536 tokens for models under 2 B
parameters (a small model's forward_backward is host-bound at 16,384: docs/performance.md), 16,384 above,
and --microbatch-tokens always wins."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _model(tmp: Path, name: str, hidden: int, layers: int, vocab: int = 151936) -> Path:
    d = tmp / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"hidden_size": hidden, "num_hidden_layers": layers,
                                               "vocab_size": vocab, "architectures": ["Qwen3ForCausalLM"]}))
    return d


def _microbatch(tmp: Path, model: Path, *extra: str) -> int:
    out = tmp / f"config-{model.name}-{len(extra)}"
    r = subprocess.run([sys.executable, str(REPO / "configure.py"), "--device", "cuda", "--model", str(model),
                        "--out", str(out), *extra], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return yaml.safe_load((out / "engine.yaml").read_text())["engine"]["max_tokens_per_microbatch"]


def test_gpu_microbatch_follows_model_size(tmp_path):
    small = _model(tmp_path, "qwen3-0.6b-shape", 1024, 28)   # ~0.5 B
    large = _model(tmp_path, "qwen3-4b-shape", 2560, 36)     # ~3.2 B
    assert _microbatch(tmp_path, small) == 65536
    assert _microbatch(tmp_path, large) == 16384
    assert _microbatch(tmp_path, small, "--microbatch-tokens", "4096") == 4096


def test_sampler_choice_and_the_hint_for_other_architectures(tmp_path):
    """--sampler writes engine.sampler; on a GPU with the default sampler, a non-Qwen3 model gets a note that
    the static engine will hand it to the HF sampler and that --sampler vllm serves it."""
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"hidden_size": 2048, "num_hidden_layers": 16, "vocab_size": 128256,
                                                   "model_type": "llama"}))

    def configure(out: str, *extra: str):
        r = subprocess.run([sys.executable, str(REPO / "configure.py"), "--device", "cuda", "--model", str(llama),
                            "--out", str(tmp_path / out), *extra], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return yaml.safe_load((tmp_path / out / "engine.yaml").read_text())["engine"], r.stderr

    engine, err = configure("a")
    assert engine["sampler"] == "auto" and "--sampler vllm" in err
    engine, err = configure("b", "--sampler", "vllm")
    assert engine["sampler"] == "vllm" and "--sampler vllm" not in err
    assert engine["sampler_options"]["kv_cache_gb"] == 40.0  # taken by the vllm sampler as its KV budget
