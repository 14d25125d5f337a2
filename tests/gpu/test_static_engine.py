"""CPU tests of the GPU sampling engine (services/backend/gpu): the same code runs eagerly on CPU.

Runs under .venv-control (torch + transformers; no peft needed) and .venv-runtime.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from helpers import TINY_PATH
from services.backend.gpu import decode_attention, skinny_gemm
from services.backend.gpu.engine import EngineOptions, StaticEngine, _batch_buckets, _ctx_bucket
from services.backend.gpu.logprobs import fused_token_logprobs
from services.backend.gpu.qwen3 import Qwen3Shape, StaticQwen3
from services.backend.gpu.sampling import choose
from services.backend.gpu.weights import Qwen3Parts
from services.backend.logprobs import gather_logprobs
from services.backend.runtime import Runtime
from services.backend.sampler import SampleSpec


@pytest.fixture(scope="module")
def hf(tiny_model):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(TINY_PATH), dtype=torch.float32).eval()


def _llama_config(**kw) -> LlamaConfig:
    """A tiny Llama shaped like SmolLM2 (no q/k norms, tied embeddings, GQA 3:1, head_dim 16)."""
    return LlamaConfig(vocab_size=8256, hidden_size=96, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
                       tie_word_embeddings=True, rope_theta=100000.0, rms_norm_eps=1e-5, **kw)


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(_llama_config(), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(str(TINY_PATH))


def _engine(hf, slots=8, ctx=256, dtype=torch.float32, **kw):
    eng = StaticEngine(Qwen3Shape.from_hf_config(hf.config), "cpu", dtype,
                       EngineOptions(max_slots=slots, max_context=ctx, **kw))
    eng.load_weights("base", hf.to(dtype))
    return eng


def _ref_logprobs(hf, prompt, toks):
    with torch.no_grad():
        lg = hf(input_ids=torch.tensor(prompt + toks)[None]).logits[0].float()
    lsm = torch.log_softmax(lg, -1)
    return lsm[len(prompt) - 1 : -1].gather(-1, torch.tensor(toks)[:, None])[:, 0]


@pytest.mark.parametrize("attention,fuse_layers", [("bmm", True), ("sdpa", True), ("bmm", False)])
def test_qwen3_forward_matches_hf(hf, attention, fuse_layers):
    m = StaticQwen3(Qwen3Shape.from_hf_config(hf.config), "cpu", torch.float32, 4, 256, attention, fuse_layers)
    m.load(Qwen3Parts(hf))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 8000, (3, 40), generator=g)
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
        assert torch.allclose(m.logits(m.prefill(ids, torch.tensor([0, 1, 2]))), ref, atol=1e-4)
        _decode_matches(m, ids, ref, steps=10)


@pytest.mark.parametrize("attention", ["bmm", "sdpa"])
def test_llama_forward_matches_hf(llama, attention):
    """A Llama (SmolLM2's family): no q/k RMSNorm, tied embeddings; prefill and decode give HF's logits.
    Planted: the Qwen3 q/k norm applied to it (qk_norm True) -> fails."""
    shape = Qwen3Shape.from_hf_config(llama.config)
    assert not shape.qk_norm and shape.rope_theta == 100000.0
    m = StaticQwen3(shape, "cpu", torch.float32, 4, 256, attention, True)
    m.load(Qwen3Parts(llama))
    assert torch.equal(m.lm_head, m.embed)  # tied
    ids = torch.randint(0, 8000, (3, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = llama(input_ids=ids).logits
        assert torch.allclose(m.logits(m.prefill(ids, torch.tensor([0, 1, 2]))), ref, atol=1e-4)
        _decode_matches(m, ids, ref, steps=8)


def test_llama_split_gemm_decode_matches_hf(llama, monkeypatch):
    """The split-GEMM decode layer (its qk_rope piece without the norm) on a Llama, with the kernels' torch
    references on CPU: HF's logits."""
    m = StaticQwen3(Qwen3Shape.from_hf_config(llama.config), "cpu", torch.float32, 4, 256, "bmm", True)
    m.load(Qwen3Parts(llama))
    m.gemm, m.attention = "triton", "triton"
    m.skinny_mm = partial(skinny_gemm.mm_reference, split=3)
    monkeypatch.setattr(decode_attention, "attend", decode_attention.attend_reference)
    ids = torch.randint(0, 8000, (3, 40), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _decode_matches(m, ids, llama(input_ids=ids).logits, steps=6)


def test_llama_variants_the_engine_cannot_serve_are_named():
    for kw, why in [({"attention_bias": True}, "attention_bias"), ({"mlp_bias": True}, "mlp_bias"),
                    ({"hidden_act": "gelu"}, "gelu"),
                    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 256}}, "llama3")]:
        with pytest.raises(ValueError, match=why):
            Qwen3Shape.from_hf_config(_llama_config(**kw))


def _decode_matches(m, ids, ref, steps: int) -> None:
    """Rows prefilled to different lengths decode in one batch (context bucket > lengths) to HF's logits."""
    lens = [30, 25, 20]
    for i, n in enumerate(lens):
        m.prefill(ids[i : i + 1, :n], torch.tensor([i]))
    pos = torch.tensor(lens)
    for _ in range(steps):
        lg = m.decode(ids[torch.arange(3), pos], pos, 128)
        assert torch.allclose(lg, ref[torch.arange(3), pos], atol=1e-4)
        pos = pos + 1


@pytest.mark.parametrize("split,fuse_silu", [(1, False), (3, False), (3, True)])
def test_split_gemm_decode_matches_hf(hf, monkeypatch, split, fuse_silu):
    """The gemm 'triton' decode layer (GEMMs between the compiled pieces; a split-K GEMM's float32
    partials summed by the piece that follows it; with fuse_silu the gate/up GEMM's SiLU * up
    epilogue), on CPU with the torch references of its Triton kernels: the same logits as HF at rows
    of different lengths."""
    m = StaticQwen3(Qwen3Shape.from_hf_config(hf.config), "cpu", torch.float32, 4, 256, "bmm", True,
                    fuse_silu=fuse_silu)
    m.load(Qwen3Parts(hf))
    m.gemm, m.attention = "triton", "triton"
    m.skinny_mm = partial(skinny_gemm.mm_reference, split=split)
    monkeypatch.setattr(decode_attention, "attend", decode_attention.attend_reference)
    ids = torch.randint(0, 8000, (3, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
        _decode_matches(m, ids, ref, steps=6)


@pytest.mark.parametrize("tma_gemm,pdl_gemm", [(False, False), (True, False), (True, True)])
def test_mid_rows_decode_matches_hf(hf, monkeypatch, tma_gemm, pdl_gemm):
    """Batches between the split-K GEMM's rows and mm_silu_tma's, on CPU with the kernels' torch references:
    HF's logits. Without tma_gemm cuBLAS pieces cut at the gate/up GEMM (which runs between them with SiLU *
    up); with it every GEMM split-K (mm_tma's partials, here 3 splits) between the split layer's pieces; with
    pdl_gemm every GEMM by the pdl kernels (here 2 splits) between the pieces launched as their dependents."""
    m = StaticQwen3(Qwen3Shape.from_hf_config(hf.config), "cpu", torch.float32, 4, 256, "bmm", True,
                    tma_gemm=tma_gemm, pdl_gemm=pdl_gemm)
    assert not m.pdl_gemm  # no TMA kernels on CPU: set below
    m.load(Qwen3Parts(hf))
    m.gemm, m.attention, m.mid_silu = "triton", "triton", skinny_gemm.mm_silu_reference
    m.mid_mm = partial(skinny_gemm.mm_reference, split=3)
    calls = {"mm": 0, "silu": 0}

    def counted(name, f):
        def g(*a):
            calls[name] = calls.get(name, 0) + 1
            return f(*a)
        return g

    m.pdl_gemm = pdl_gemm
    m.mid_mm_pdl = counted("mm", partial(skinny_gemm.mm_reference, split=2))
    m.mid_silu_pdl = counted("silu", skinny_gemm.mm_silu_reference)
    if pdl_gemm:  # the plain GEMMs must not run
        m.mid_silu = counted("plain_silu", skinny_gemm.mm_silu_reference)
    if tma_gemm:  # each variant must take its own path
        m._decode_mid = None
    if not tma_gemm or pdl_gemm:
        m.mid_mm = None
    monkeypatch.setattr(skinny_gemm, "MAX_ROWS", 2)  # the test's 3 rows: above the split-K rows, within TMA_ROWS
    monkeypatch.setattr(decode_attention, "attend", decode_attention.attend_reference)
    m.skinny_mm = m.skinny_silu = None  # the split-K path must not run
    ids = torch.randint(0, 8000, (3, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
        _decode_matches(m, ids, ref, steps=6)
    L = m.shape.layers
    assert calls == ({"mm": 6 * (3 * L + 1), "silu": 6 * L} if pdl_gemm else {"mm": 0, "silu": 0}), calls


def test_sampled_logprobs_match_trainer_and_limits(hf, tok):
    eng = _engine(hf)
    specs = [SampleSpec(prompt=list(range(100, 120)), num_samples=4, max_tokens=30, seed=1),
             SampleSpec(prompt=list(range(200, 250)), num_samples=3, max_tokens=20, temperature=0.7, top_p=0.9),
             SampleSpec(prompt=list(range(300, 305)), num_samples=5, max_tokens=15, top_k=5, seed=3)]
    res = eng.generate(specs, tok)  # 12 sequences > 8 slots: the third group waits for free slots
    for s, r in zip(specs, res):
        assert len(r.sequences) == s.num_samples
        for toks, lps, reason in r.sequences:
            assert len(toks) == s.max_tokens and reason == "length"
            assert torch.allclose(_ref_logprobs(hf, s.prompt, toks), torch.tensor(lps), atol=1e-4)
    assert eng.free == list(range(8)) and all(x is None for x in eng.slot_seq)


def test_seed_reproducible_whatever_the_batch(hf, tok):
    eng = _engine(hf)
    spec = SampleSpec(prompt=list(range(10, 30)), num_samples=2, max_tokens=12, seed=42)
    alone = eng.generate([spec], tok)[0].sequences
    other = SampleSpec(prompt=list(range(500, 540)), num_samples=3, max_tokens=20)
    mixed = eng.generate([other, spec], tok)[1].sequences
    assert [s[0] for s in alone] == [s[0] for s in mixed]
    assert alone[0][0] != alone[1][0]  # the samples of one request differ


def test_greedy_stop_tokens_and_strings(hf, tok):
    eng = _engine(hf)
    prompt = list(range(40, 60))
    greedy = eng.generate([SampleSpec(prompt=prompt, max_tokens=10, temperature=0.0)], tok)[0].sequences[0][0]
    ref, cur = [], list(prompt)
    with torch.no_grad():
        for _ in range(10):
            t = int(hf(input_ids=torch.tensor(cur)[None]).logits[0, -1].argmax())
            ref.append(t)
            cur.append(t)
    assert greedy == ref
    tiny_p = eng.generate([SampleSpec(prompt=prompt, max_tokens=10, top_p=1e-6, seed=5)], tok)[0].sequences[0][0]
    assert tiny_p == ref
    stop = eng.generate([SampleSpec(prompt=prompt, max_tokens=10, temperature=0.0, stop_token_ids={ref[3]})], tok)
    toks, _, reason = stop[0].sequences[0]
    assert reason == "stop" and toks == ref[: ref.index(ref[3]) + 1]
    text = tok.decode(ref[:4])
    s = eng.generate([SampleSpec(prompt=prompt, max_tokens=10, temperature=0.0, stop_strings=[text[-2:]])], tok)
    toks, _, reason = s[0].sequences[0]
    assert reason == "stop" and len(toks) <= 4 and text[-2:] in tok.decode(toks)


def test_prompt_logprobs(hf, tok):
    eng = _engine(hf)
    prompt = list(range(70, 95))
    r = eng.generate([SampleSpec(prompt=prompt, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=3)], tok)[0]
    with torch.no_grad():
        lsm = torch.log_softmax(hf(input_ids=torch.tensor(prompt)[None]).logits[0].float(), -1)
    ref = lsm[:-1].gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]
    assert torch.isnan(torch.tensor(r.prompt_logprobs[0]))
    assert torch.allclose(torch.tensor(r.prompt_logprobs[1:]), ref, atol=1e-4)
    ids, lps = r.topk_prompt
    assert ids.shape == (len(prompt), 3) and (ids[1:, 0] == lsm[:-1].argmax(-1).numpy()).all()


def test_continuous_batching_poll(hf, tok):
    """Requests arriving while the decode loop runs join it and finish through their callbacks."""
    eng = _engine(hf, slots=4)
    late = [SampleSpec(prompt=list(range(600 + 10 * i, 610 + 10 * i)), num_samples=2, max_tokens=8, seed=i)
            for i in range(3)]
    got: dict[int, object] = {}
    calls = {"n": 0}

    def poll():
        calls["n"] += 1
        if calls["n"] in (3, 5, 7):
            i = (calls["n"] - 3) // 2
            return [(late[i], lambda r, i=i: got.__setitem__(i, r))]
        return []

    first = SampleSpec(prompt=list(range(10, 20)), num_samples=3, max_tokens=20, seed=9)
    res = eng.generate([first], tok, poll=poll)
    assert len(res[0].sequences) == 3 and sorted(got) == [0, 1, 2]
    for i, s in enumerate(late):
        alone = eng.generate([s], tok)[0].sequences
        assert [q[0] for q in got[i].sequences] == [q[0] for q in alone]
        for toks, lps, _ in got[i].sequences:
            assert torch.allclose(_ref_logprobs(hf, s.prompt, toks), torch.tensor(lps), atol=1e-4)


def test_bfloat16_engine_close_to_float32_trainer(hf, tok):
    eng = _engine(hf, dtype=torch.bfloat16)
    try:
        spec = SampleSpec(prompt=list(range(100, 140)), num_samples=2, max_tokens=16, seed=0)
        r = eng.generate([spec], tok)[0]
    finally:
        hf.to(torch.float32)
    for toks, lps, _ in r.sequences:
        d = _ref_logprobs(hf, spec.prompt, toks) - torch.tensor(lps)
        assert float((d**2).mean()) < 0.01


def test_sampling_distribution():
    V, N = 6, 20000
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]]).expand(N, V).contiguous()
    seed, step, vidx = torch.arange(N, dtype=torch.int64) * 7919 + 5, torch.zeros(N, dtype=torch.int64), torch.arange(V)

    def freq(temp, k, p, filt):
        t, lp = choose(logits, torch.full((N,), temp), torch.full((N,), k, dtype=torch.long), torch.full((N,), p), seed,
                       step, vidx, filt)
        assert torch.allclose(lp, torch.log_softmax(logits, -1).gather(-1, t[:, None])[:, 0])
        return torch.bincount(t, minlength=V).float() / N

    p = torch.softmax(logits[0], -1)
    assert (freq(1.0, -1, 1.0, False) - p).abs().max() < 0.015
    assert (freq(0.5, -1, 1.0, False) - torch.softmax(logits[0] / 0.5, -1)).abs().max() < 0.015
    k3 = freq(1.0, 3, 1.0, True)
    assert k3[3:].sum() == 0 and (k3[:3] - torch.softmax(logits[0, :3], -1)).abs().max() < 0.015
    p7 = freq(1.0, -1, 0.7, True)
    assert p7[2:].sum() == 0 and abs(float(p7[0]) - float(p[0] / p[:2].sum())) < 0.015
    assert freq(0.0, -1, 1.0, False)[0] == 1.0


def test_buckets():
    assert _batch_buckets(64)[:4] == [1, 2, 4, 8] and _batch_buckets(64)[-1] == 64
    assert _batch_buckets(100)[-1] == 100 and all(b <= 100 for b in _batch_buckets(100))
    assert _ctx_bucket(1, 4096) == 128 and _ctx_bucket(129, 4096) == 256 and _ctx_bucket(5000, 4096) == 4096


def test_fused_token_logprobs_values_and_grads(hf):
    """The CUDA training path (chunked lm_head + float32 log-softmax under checkpointing) equals the
    plain logits route in value and gradient."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 8000, (2, 50), generator=g)
    tgt = torch.randint(0, 8000, (2, 50), generator=g)
    w = torch.rand(2, 50, generator=g)
    for p in hf.parameters():
        p.requires_grad_(True)
    try:
        ref = gather_logprobs(hf(input_ids=ids).logits, tgt)
        (ref * w).sum().backward()
        gref = {n: p.grad.clone() for n, p in hf.named_parameters()}
        hf.zero_grad(set_to_none=True)
        out = fused_token_logprobs(hf, ids, tgt, chunk_tokens=32)  # chunks straddle the two rows
        (out * w).sum().backward()
        assert torch.allclose(out, ref, atol=1e-5)
        for n, p in hf.named_parameters():
            assert torch.allclose(p.grad, gref[n], atol=1e-5, rtol=1e-4), n
    finally:
        hf.zero_grad(set_to_none=True)
        for p in hf.parameters():
            p.requires_grad_(False)


def test_overlapped_steps_record_the_same_tokens(hf, tok):
    """With ``overlap`` (the default with CUDA graphs) step k+1 is launched before step k's tokens are
    recorded; on CPU the same bookkeeping runs eagerly. Rows ending by max_tokens, by a stop token and by
    a stop string at different steps, slots refilled from the queue and requests arriving through poll
    must give exactly what step-by-step decoding gives."""
    prompt = list(range(40, 60))
    greedy = _engine(hf).generate([SampleSpec(prompt=prompt, max_tokens=12, temperature=0.0)], tok)[0].sequences[0][0]
    stop_text = tok.decode(greedy[:6])[-2:]

    def run(overlap):
        eng = _engine(hf, slots=4, overlap=overlap)
        specs = [SampleSpec(prompt=prompt, max_tokens=12, temperature=0.0, stop_token_ids={greedy[3]}),
                 SampleSpec(prompt=prompt, max_tokens=12, temperature=0.0, stop_strings=[stop_text]),
                 SampleSpec(prompt=list(range(100, 110)), num_samples=3, max_tokens=5, seed=1),
                 SampleSpec(prompt=list(range(200, 215)), num_samples=2, max_tokens=9, seed=2)]
        late = [SampleSpec(prompt=list(range(300, 308)), num_samples=2, max_tokens=7, seed=3)]
        got: list = []
        calls = {"n": 0}

        def poll():
            calls["n"] += 1
            return [(late[0], got.append)] if calls["n"] == 4 else []

        res = eng.generate(specs, tok, poll=poll)
        assert eng._inflight is None
        return [q for r in res + got for q in r.sequences], eng.stats["tokens"]

    (plain, n_plain), (overlapped, n_overlapped) = run(False), run(True)
    assert n_overlapped == n_plain and len(overlapped) == len(plain) == 9
    for (toks, lps, why), (toks2, lps2, why2) in zip(plain, overlapped):
        # same tokens and ends; logprobs equal up to the batch size's float rounding (a step launched
        # ahead still holds the rows that ended in the step before)
        assert (toks2, why2) == (toks, why)
        assert torch.allclose(torch.tensor(lps2), torch.tensor(lps), atol=1e-5)
    assert plain[0][2] == "stop" and plain[1][2] == "stop"


def _runtime_for(cfg, tmp_path, name):
    torch.manual_seed(0)
    d = tmp_path / name
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(d))
    for f in Path(TINY_PATH).iterdir():
        if f.name.startswith("tokenizer") or f.name == "chat_template.jinja":
            shutil.copy(f, d / f.name)
    return Runtime([{"name": name, "path": str(d)}], tmp_path / f"state-{name}", device="cpu", dtype="float32",
                   sampler="static", sampler_options={"max_slots": 4, "max_context": 128})


def test_static_engine_serves_a_llama_through_the_runtime(tmp_path):
    """engine.sampler 'static' on a Llama (SmolLM2's family): the static engine serves it (no HF fallback) and
    its sampled logprobs are the trainer's."""
    rt = _runtime_for(_llama_config(), tmp_path, "llama")
    spec = SampleSpec(prompt=[5, 6, 7, 8], num_samples=2, max_tokens=6, seed=1)
    res = rt.sample("llama", None, [spec])[0]
    assert list(rt.engine.engines) == ["llama"] and rt.engine.unsupported == {"llama": None}
    for toks, lps, _ in res.sequences:
        assert len(toks) == 6
        assert torch.allclose(_ref_logprobs(rt.bases["llama"].hf, spec.prompt, toks), torch.tensor(lps), atol=1e-4)


def test_static_engine_hands_other_architectures_to_the_hf_sampler(tmp_path):
    """A Llama with attention biases under engine.sampler 'static': the engine cannot serve it, so its requests
    are sampled by the HF sampler instead of failing on the missing weights."""
    rt = _runtime_for(_llama_config(attention_bias=True), tmp_path, "llama-bias")
    res = rt.sample("llama-bias", None, [SampleSpec(prompt=[5, 6, 7], num_samples=2, max_tokens=5, seed=1)])[0]
    assert [len(s[0]) for s in res.sequences] == [5, 5]
    assert rt.engine.engines == {}  # no static engine was built for it
    assert "attention_bias" in rt.engine.unsupported["llama-bias"]
