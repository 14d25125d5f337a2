"""Runtime-level check of a sampler on CPU (needs peft: run with .venv-runtime).

    .venv-runtime/bin/python tests/gpu/runtime_static_check.py [DEVICE DTYPE TOL [SAMPLER [MERGE]]]

SAMPLER is static (default), hf or vllm (vLLM itself on a GPU; the CPU contract test puts
tests/gpu/fake_vllm first on PYTHONPATH);
CHECK_SAMPLER_OPTIONS (JSON) adds sampler options; MERGE (1/0) folds LoRA snapshots into a plain copy for sampling
(``merge_lora_sampling``).

A LoRA model and a full fine-tuned model take one cross-entropy step; their sampler snapshots
(in memory, and the LoRA one also reloaded from disk) are sampled through ``Runtime.sample`` with
``sampler='static'``; the sampled logprobs must equal the trainer's ``forward`` logprobs for the
same tokens, and differ from the base model's; a snapshot keeps its weights after a further optim_step
(full FT: copy-on-write). Prints OK on success, raises otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from services.backend.codec import Datum, FwdBwdRequest  # noqa: E402
from services.backend.runtime import Runtime, TrainConfig  # noqa: E402
from services.backend.sampler import SampleSpec  # noqa: E402

ADAM = dict(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip_norm=0.0)


def forward_lps(rt: Runtime, mid: str, prompt: list[int], toks: list[int]) -> np.ndarray:
    seq = prompt + toks
    d = Datum(np.array(seq[:-1]), {"target_tokens": np.array(seq[1:]), "weights": np.ones(len(seq) - 1, np.float32)})
    out, _ = rt.forward_backward(FwdBwdRequest(mid, 0, "cross_entropy", {}, True, [d]))
    return out[0]["logprobs"][len(prompt) - 1 :]


def main(device: str = "cpu", dtype: str = "float32", model: str | None = None, tol: float = 1e-4,
         sampler: str = "static", merge: bool = False) -> None:
    path = model or str(ROOT / "models" / "qwen3-tiny-xs")
    with tempfile.TemporaryDirectory() as tmp:
        opts = {"max_slots": 8, "max_context": 512, **json.loads(os.environ.get("CHECK_SAMPLER_OPTIONS", "{}"))}
        rt = Runtime([{"name": "m", "path": path}], Path(tmp), device=device, dtype=dtype, sampler=sampler,
                     sampler_options=opts, merge_lora_sampling=merge)
        assert rt.engine.name == sampler
        rng = np.random.default_rng(0)
        seq = rng.integers(0, 8000, size=33)
        d = Datum(seq[:-1], {"target_tokens": seq[1:], "weights": np.ones(32, np.float32)})
        prompt = [int(x) for x in rng.integers(0, 8000, size=12)]
        spec = SampleSpec(prompt=prompt, num_samples=3, max_tokens=10, seed=7)
        # prompts sharing a 40-token prefix with suffixes of different lengths (shared-prefix prefill)
        head = [int(x) for x in rng.integers(0, 8000, size=40)]
        shared = [SampleSpec(prompt=head + [int(x) for x in rng.integers(0, 8000, size=n)], max_tokens=8, seed=n)
                  for n in (3, 9)]
        base_res = rt.sample("m", None, [spec])[0]
        worst = 0.0
        for rank in (4, 0):
            mid = f"model-r{rank}"
            rt.create_model(mid, TrainConfig("m", rank=rank, seed=1))
            rt.forward_backward(FwdBwdRequest(mid, 1, "cross_entropy", {}, False, [d]))
            rt.optim_step(mid, ADAM)
            key = f"snap-{rank}"
            rt.snapshot_for_sampler(mid, key)
            keys = [key]
            if rank:
                ck = rt.save(mid, "s1", "sampler_weights", False, True)
                rt.sampler_from_checkpoint(key + "-disk", ck)
                keys.append(key + "-disk")
            for k in keys + keys[:1]:  # back to the first: a folded copy must be refilled
                res = rt.sample("m", k, [spec, SampleSpec(prompt=prompt[:5], max_tokens=4, temperature=0.0)])[0]
                assert len(res.sequences) == 3
                outs = rt.sample("m", k, shared)  # a batch of its own, so the shared prefix is found
                checks = [(prompt, sq) for sq in res.sequences]
                checks += [(sp.prompt, o.sequences[0]) for sp, o in zip(shared, outs)]
                for pr, (toks, lps, _) in checks:
                    ref = forward_lps(rt, mid, pr, toks)
                    err = np.abs(ref - np.array(lps))
                    assert float(err.max()) < tol, (k, float(err.max()))
                    bref = forward_lps_base(rt, pr, toks)
                    berr = np.abs(bref - np.array(lps))
                    assert float(berr.mean()) > 2 * float(err.mean()) + 1e-5, ("sampler served the base weights?", k,
                                                                              float(berr.mean()), float(err.mean()))
                    worst = max(worst, float(err.max()))
            # The snapshot keeps its weights when training moves on (full FT: shared with the
            # trainer until optim_step, then copied); sampling the base in between makes the
            # static engine reload the snapshot's weights from its module.
            greedy = SampleSpec(prompt=prompt, max_tokens=6, temperature=0.0)
            sw_mod = rt.samplers[key].module
            assert (sw_mod is not None and sw_mod is rt.trainables[mid].module) == (rank == 0)
            before = rt.sample("m", key, [greedy])[0].sequences[0]
            rt.forward_backward(FwdBwdRequest(mid, 2, "cross_entropy", {}, False, [d]))
            rt.optim_step(mid, ADAM)
            assert rt.samplers[key].module is None or rt.samplers[key].module is not rt.trainables[mid].module
            rt.sample("m", None, [greedy])
            after = rt.sample("m", key, [greedy])[0].sequences[0]
            assert after[0] == before[0] and np.allclose(after[1], before[1], atol=1e-5), (rank, before, after)
            rt.unload_model(mid)
        # base weights again after snapshots (the engine reloads them)
        again = rt.sample("m", None, [spec])[0]
        assert [s[0] for s in again.sequences] == [s[0] for s in base_res.sequences]
        if rt.engine.name == "hf":
            stats = {"merged": rt.bases["m"]._merged is not None}
        else:
            stats = getattr(rt.engine, "stats", None) or rt.engine.engines["m"].stats
        print("OK", {"device": device, "dtype": dtype, "sampler": sampler, "max_abs_logprob_err": worst, **stats})


def forward_lps_base(rt: Runtime, prompt: list[int], toks: list[int]) -> np.ndarray:
    if "base-ref" not in rt.trainables:
        rt.create_model("base-ref", TrainConfig("m", rank=0))
    return forward_lps(rt, "base-ref", prompt, toks)


if __name__ == "__main__":
    torch.manual_seed(0)
    a = sys.argv[1:]
    main(a[0] if a else "cpu", a[1] if len(a) > 1 else "float32", None, float(a[2]) if len(a) > 2 else 1e-4,
         a[3] if len(a) > 3 else "static", len(a) > 4 and a[4] == "1")
