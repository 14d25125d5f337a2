"""A minimal Qwen3 / Llama forward over a static, per-slot KV cache.

The two families differ here only in Qwen3's per-head RMSNorm of q and k before the rotary
(``Qwen3Shape.qk_norm``; a Llama has none, and its tied embeddings arrive as ``lm_head``'s weight).

Weights live in preallocated buffers (stacked over layers; q/k/v and gate/up fused), so that new
sampler weights are copied *into* them and captured CUDA graphs stay valid. The KV cache is one
``[layers, slots, kv_heads, max_context, head_dim]`` tensor each for K and V.

* ``prefill(ids, slots)``: right-padded prompts ``[n, P]`` through the model with causal SDPA,
  K/V written to cache positions ``[0, P)`` of each row's slot; returns the final-normed hidden
  states ``[n, P, H]`` (the caller applies ``lm_head`` where it needs logits).
* ``decode(tok, pos, ctx)``: one token for each of the slots ``0..b-1`` at position ``pos[i]``;
  attends over cache positions ``[0, pos[i]]`` (the Triton split-K kernel of ``decode_attention``
  reads only those; bmm/sdpa read ``[0, ctx)`` masked). Static shapes for a given
  ``(b, ctx)``, no host synchronisation: graph-capturable. Up to ``skinny_gemm.MAX_ROWS`` rows the
  GEMMs are ``skinny_gemm``'s split-K Triton kernel between compiled elementwise pieces
  (``gemm: auto`` on CUDA; with ``fuse_silu`` the gate/up GEMM applies SiLU * up itself). Up to
  ``skinny_gemm.TMA_ROWS`` rows on Hopper the same layer with TMA kernels (``tma_gemm``: ``skinny_gemm.mm_tma``
  split-K, the gate/up GEMM with SiLU * up ``mm_silu_tma``); without ``tma_gemm``, cuBLAS inside compiled
  pieces cut at ``mm_silu_tma``; above (or elsewhere) cuBLAS inside the compiled pieces. With
  ``triton_pieces`` the split-GEMM layer's q/k-norm + rotary and residual-add + RMSNorm pieces are
  ``decode_pieces``' single Triton launches instead of Inductor's. With ``pdl_gemm`` (the TMA layer with those
  pieces, Hopper) each GEMM and each piece after one is launched as a programmatic dependent of the kernel
  before it, which lets it start early: a GEMM requests its weight tiles while the piece before it runs, a
  piece's programs are resident when the GEMM before it completes (skinny_gemm and decode_pieces ``pdl``).

Numerics follow transformers' Qwen3 (RMSNorm in float32 then cast back before the weight, rotary
tables computed in float32 and cast to the model dtype, residuals in the model dtype), so logits
match HF's forward to within the dtype's rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F

from .. import unembed
from ..unembed import linear_f32
from . import decode_attention, decode_pieces, skinny_gemm

FAMILIES = ("qwen3", "llama")   # HF model_type values the engine serves


@dataclass(frozen=True)
class Qwen3Shape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    rope_theta: float
    qk_norm: bool = True      # Qwen3: q/k RMSNorm per head before the rotary; Llama: none

    @classmethod
    def from_hf_config(cls, cfg) -> "Qwen3Shape":
        kind = getattr(cfg, "model_type", None)
        if kind not in FAMILIES:
            raise ValueError(f"model_type {kind!r}: the static engine runs {' and '.join(FAMILIES)} dense models")
        if kind == "llama":
            extra = [k for k in ("attention_bias", "mlp_bias") if getattr(cfg, k, False)]
            if getattr(cfg, "hidden_act", "silu") != "silu":
                extra.append(f"hidden_act {cfg.hidden_act!r}")
            if extra:
                raise ValueError(f"static engine serves Llama without biases and with SiLU, not {', '.join(extra)}")
        rope = getattr(cfg, "rope_parameters", None) or {}
        theta = rope.get("rope_theta") if isinstance(rope, dict) else None
        if theta is None:
            theta = getattr(cfg, "rope_theta", 1_000_000.0)
        if isinstance(rope, dict) and rope.get("rope_type", "default") not in ("default", None):
            raise ValueError(f"static engine supports default rotary only, not {rope.get('rope_type')!r}")
        scaling = getattr(cfg, "rope_scaling", None)
        scaling_type = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else None
        if scaling_type not in ("default", None):
            raise ValueError(f"static engine supports default rotary only, not {scaling!r}")
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(vocab=int(cfg.vocab_size), hidden=int(cfg.hidden_size), layers=int(cfg.num_hidden_layers),
                   heads=int(cfg.num_attention_heads), kv_heads=int(cfg.num_key_value_heads), head_dim=int(head_dim),
                   ffn=int(cfg.intermediate_size), eps=float(cfg.rms_norm_eps), rope_theta=float(theta),
                   qk_norm=kind == "qwen3")

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        D, H = self.head_dim, self.hidden
        per_layer = (self.heads + 2 * self.kv_heads) * D * H + H * self.heads * D + 3 * H * self.ffn
        return dtype_bytes * (self.layers * per_layer + 2 * self.vocab * H)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


class StaticQwen3:
    def __init__(self, shape: Qwen3Shape, device: torch.device | str, dtype: torch.dtype, max_slots: int,
                 max_context: int, attention: str = "auto", fuse_layers: bool = True, gemm: str = "torch",
                 fuse_silu: bool = True, triton_pieces: bool = True, tma_gemm: bool = True, pdl_gemm: bool = False):
        self.shape, self.device, self.dtype = shape, torch.device(device), dtype
        self.qd, self.kd = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        self.fuse_layers = bool(fuse_layers)  # decode: post_pre across layer boundaries (False: pre + post per layer)
        self.max_slots, self.max_context = int(max_slots), int(max_context)
        self.attention = self.resolve_attention(attention, self.device, shape, dtype)
        self.gemm = self.resolve_gemm(gemm, self.device, dtype)
        # the split-K decode GEMM (rows <= skinny_gemm.MAX_ROWS); the CPU tests swap in mm_reference
        self.skinny_mm = skinny_gemm.mm if self.gemm == "triton" else skinny_gemm.mm_reference
        # the split-GEMM layer's qk_rope / add_norm as decode_pieces' Triton kernels (gemm 'triton' only)
        self.triton_pieces = bool(triton_pieces) and self.gemm == "triton" and decode_pieces.available()
        self.fuse_silu = bool(fuse_silu)  # split-GEMM decode: SiLU * up in the gate/up GEMM (else its own kernel)
        self.skinny_silu = skinny_gemm.mm_silu if self.gemm == "triton" else skinny_gemm.mm_silu_reference
        # rows MAX_ROWS < b <= TMA_ROWS (Hopper): the gate/up GEMM with SiLU * up through TMA; with tma_gemm the
        # other GEMMs too (mm_tma, split-K) between the split layer's pieces, else cuBLAS inside compiled pieces
        # cut at the gate/up GEMM (the CPU tests set the kernels' torch references)
        tma_ok = (shape.ffn % 32 == 0 and shape.hidden % 8 == 0  # whole 32-column tiles, 16-byte-aligned rows
                  and self.qd % 8 == 0)
        self.mid_silu = (skinny_gemm.mm_silu_tma
                         if self.gemm == "triton" and tma_ok and skinny_gemm.tma_available(self.device) else None)
        self.tma_gemm = bool(tma_gemm)
        self.mid_mm = skinny_gemm.mm_tma
        # the TMA layer's GEMMs and pieces launched as programmatic dependents of the kernel before (Hopper, Gluon)
        self.pdl_gemm = (bool(pdl_gemm) and self.tma_gemm and self.mid_silu is not None and self.triton_pieces
                         and skinny_gemm.pdl_available(self.device))
        self.mid_mm_pdl = partial(skinny_gemm.mm_tma, pdl=True)
        self.mid_silu_pdl = partial(skinny_gemm.mm_silu_tma, pdl=True)
        s, dev = shape, self.device
        L, H, D, Hq, Hkv, Fd, V = s.layers, s.hidden, s.head_dim, s.heads, s.kv_heads, s.ffn, s.vocab
        self.group = Hq // Hkv
        self.scale = D ** -0.5
        kw = dict(device=dev, dtype=dtype)
        self.embed = torch.empty(V, H, **kw)
        self.lm_head = torch.empty(V, H, **kw)
        self.norm = torch.empty(H, **kw)
        self.w_qkv = torch.empty(L, self.qd + 2 * self.kd, H, **kw)
        self.w_o = torch.empty(L, H, self.qd, **kw)
        self.w_gu = torch.empty(L, 2 * Fd, H, **kw)
        self.w_down = torch.empty(L, H, Fd, **kw)
        self.ln1 = torch.empty(L, H, **kw)
        self.ln2 = torch.empty(L, H, **kw)
        self.qn = torch.empty(L, D, **kw)
        self.kn = torch.empty(L, D, **kw)
        T, S = self.max_context, self.max_slots
        self.kc = torch.zeros(L, S, Hkv, T, D, **kw)
        self.vc = torch.zeros(L, S, Hkv, T, D, **kw)
        # Rotary tables exactly as HF computes them: float32 inv_freq * position, cos/sin, cast.
        inv_freq = 1.0 / (s.rope_theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
        freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = emb.cos().to(**kw)
        self.sin = emb.sin().to(**kw)
        self.ar_slots = torch.arange(S, device=dev)
        self.ar_ctx = torch.arange(T, device=dev)
        self._bmm_f32 = self._probe_bmm_out_dtype()
        half_ok = dtype in (torch.bfloat16, torch.float16) and (self._bmm_f32 or dev.type != "cuda")
        # a float32 residual stream (services/backend/residual.py, the trainer's too): every GEMM writes float32,
        # residual adds and norms in float32, rounded to the model dtype only where a GEMM or the attention reads
        self.f32_residual = unembed.RESIDUAL_F32 and half_ok
        # logits in float32 out of the lm_head GEMM, as the trainer's (issue 41: bf16-rounded logits were most of the
        # sampler/trainer gap); needs torch.mm(out_dtype=) on CUDA, which the bmm probe stands for
        self.f32_logits = (unembed.ENABLED or self.f32_residual) and half_ok
        # float32 attention (hf_decode.f32_sdpa on the trainer's side): probabilities not rounded before P @ V
        self.f32_attention = unembed.ATTENTION_F32 and self.f32_residual
        self._build_pieces()
        self.compiled = False

    @staticmethod
    def resolve_attention(attention: str, device: torch.device, shape: Qwen3Shape,
                          dtype: torch.dtype = torch.bfloat16) -> str:
        """Decode attention: 'triton' (split-K kernel reading each row to its own length, KV write
        fused: the fastest measured, docs/performance.md), 'bmm' (cuBLAS over the context bucket),
        'sdpa'; 'auto' = triton on CUDA where Triton is installed, head_dim is a power of two and the model is
        bf16/fp16 (a float32 model decodes through bmm, as on the CPU), else bmm."""
        if attention not in ("auto", "triton", "bmm", "sdpa"):
            raise ValueError(f"attention must be auto, triton, bmm or sdpa, got {attention!r}")
        pow2 = shape.head_dim & (shape.head_dim - 1) == 0
        if attention == "triton" and not (decode_attention.available() and pow2):
            raise ValueError("attention 'triton' needs the triton package and a power-of-two head_dim "
                             f"(head_dim {shape.head_dim}, "
                             f"triton {'present' if decode_attention.available() else 'missing'})")
        if attention == "auto":
            half = dtype in (torch.bfloat16, torch.float16)
            return "triton" if device.type == "cuda" and decode_attention.available() and pow2 and half else "bmm"
        return attention

    @staticmethod
    def resolve_gemm(gemm: str, device: torch.device, dtype: torch.dtype = torch.bfloat16) -> str:
        """Decode GEMMs: 'torch' (cuBLAS inside the compiled pieces), 'triton' (skinny_gemm's split-K
        kernel for batches up to skinny_gemm.MAX_ROWS, the pieces between the GEMMs compiled), 'auto' =
        triton on CUDA where Triton is installed and the model is bf16/fp16 (the Triton GEMMs take half-precision
        operands only: a float32 model, ``--dtype float32`` on a GPU, decodes through cuBLAS), else torch."""
        if gemm not in ("auto", "triton", "torch"):
            raise ValueError(f"gemm must be auto, triton or torch, got {gemm!r}")
        half = dtype in (torch.bfloat16, torch.float16)
        if gemm == "triton" and not half:
            raise ValueError(f"gemm 'triton' takes bf16/fp16 models only, got {dtype} (use gemm 'torch' or 'auto')")
        if gemm == "triton" and not skinny_gemm.available():
            raise ValueError("gemm 'triton' needs the triton package")
        if gemm == "auto":
            return "triton" if device.type == "cuda" and skinny_gemm.available() and half else "torch"
        return gemm

    # ------------------------------------------------------------------ fusable pieces
    def _build_pieces(self) -> None:
        """Pure functions of tensors (no mutation): the parts of a layer between the matmul-heavy
        calls. Eager by default; ``enable_compile`` fuses their elementwise work with Inductor (one
        dynamic-shape compile serves every layer, batch bucket and prefill length), which cuts the
        decode step from ~55 kernels per layer to ~15."""
        s = self.shape
        eps, qd, kd, Hq, Hkv, D, Fd = s.eps, self.qd, self.kd, s.heads, s.kv_heads, s.head_dim, s.ffn
        scale, dt = self.scale, self.dtype
        has_qk_norm = s.qk_norm

        def qk_normed(qk, qn, kn):  # [N, Hq + Hkv, D]: Qwen3's per-head RMSNorm of q and k (Llama: none)
            if not has_qk_norm:
                return qk
            return rms_norm(qk, torch.cat((qn.expand(Hq, D), kn.expand(Hkv, D))), eps)

        # Inputs are fresh tensors or fixed-shape weight views: views of varying shape would make
        # Dynamo guard on their bases and recompile.
        def pre(x, ln1, w_qkv, qn, kn, cos, sin):  # cos/sin [N, D]
            cos, sin = cos[:, None, :], sin[:, None, :]
            h = rms_norm(x, ln1, eps)
            qkv = F.linear(h, w_qkv)
            # q and k heads normed and rotated as one [N, Hq + Hkv, D] tensor (one kernel, the same
            # per-head arithmetic as two); q, k, v are views into it and qkv (the Triton attention
            # reads them through their strides)
            qk = rope(qk_normed(qkv[:, : qd + kd].reshape(-1, Hq + Hkv, D), qn, kn), cos, sin)
            return qk[:, :Hq], qk[:, Hq:], qkv[:, qd + kd :].reshape(-1, Hkv, D)

        def post(x, o, w_o, ln2, w_gu, w_down):  # o: attention output, any shape with N * Hq * D elements
            x = x + F.linear(o.reshape(x.shape[0], qd), w_o)
            h = rms_norm(x, ln2, eps)
            gu = F.linear(h, w_gu)
            return x + F.linear(F.silu(gu[:, :Fd]) * gu[:, Fd:], w_down)

        # A layer's end and the next layer's start in one piece: the residual add fuses with the next
        # RMSNorm (one kernel fewer per layer in decode)
        def post_pre(x, o, w_o, ln2, w_gu, w_down, ln1, w_qkv, qn, kn, cos, sin):
            x = post(x, o, w_o, ln2, w_gu, w_down)
            return (x, *pre(x, ln1, w_qkv, qn, kn, cos, sin))

        def post_head(x, o, w_o, ln2, w_gu, w_down, norm, lm_head):
            return head(post(x, o, w_o, ln2, w_gu, w_down), norm, lm_head)

        # ``post`` cut at the gate/up GEMM (which mm_silu_tma does between the two): (x, normed x), then the
        # down projection's residual add with the next layer's start (or the head)
        def attn_out(x, o, w_o, ln2):
            x = x + F.linear(o.reshape(x.shape[0], qd), w_o)
            return x, rms_norm(x, ln2, eps)

        def mlp_out_pre(x, a, w_down, ln1, w_qkv, qn, kn, cos, sin):
            x = x + F.linear(a, w_down)
            return (x, *pre(x, ln1, w_qkv, qn, kn, cos, sin))

        def mlp_out_head(x, a, w_down, norm, lm_head):
            return head(x + F.linear(a, w_down), norm, lm_head)

        def mid(sc, bias):  # sc [b * Hkv, G, ctx], bias [b, 1, 1, ctx] -> probabilities [b * Hkv, G, ctx]
            b, ctx = bias.shape[0], bias.shape[-1]
            p = torch.softmax(sc.float().view(b, Hkv, -1, ctx) * scale + bias, dim=-1).to(dt)
            return p.view(sc.shape)

        f32_head = self.f32_logits

        def head(x, norm, lm_head):   # with f32_logits: the normed hidden states (``logits_of`` applies lm_head)
            h = rms_norm(x, norm, eps)
            return h if f32_head else F.linear(h, lm_head)

        # The split-GEMM decode layer (gemm 'triton'): the GEMMs run between these pieces, each of which
        # takes a GEMM's result (float32 split-K partials [split, N, out] or [N, out]) and sums it while
        # doing the elementwise work that follows it (skinny_gemm.reduce)
        def rmsnorm(x, w):
            return rms_norm(x, w, eps)

        def qk_rope(p, qn, kn, cos, sin):
            qkv = skinny_gemm.reduce(p, dt)
            cos, sin = cos[:, None, :], sin[:, None, :]
            qk = rope(qk_normed(qkv[:, : qd + kd].reshape(-1, Hq + Hkv, D), qn, kn), cos, sin)
            return qk[:, :Hq], qk[:, Hq:], qkv[:, qd + kd :].reshape(-1, Hkv, D)

        def add_norm(x, p, w):  # residual add + the next RMSNorm: (x, normed x)
            x = x + skinny_gemm.reduce(p, dt)
            return x, rms_norm(x, w, eps)

        def silu_mul(p):
            gu = skinny_gemm.reduce(p, dt)
            return F.silu(gu[:, :Fd]) * gu[:, Fd:]

        self._eager = dict(pre=pre, post=post, mid=mid, head=head, post_pre=post_pre, post_head=post_head,
                           attn_out=attn_out, mlp_out_pre=mlp_out_pre, mlp_out_head=mlp_out_head,
                           rmsnorm=rmsnorm, qk_rope=qk_rope, add_norm=add_norm, silu_mul=silu_mul)
        if self.f32_residual:
            self._eager.update(self._residual_f32_pieces())
        r32 = self.f32_residual
        self._triton = {}
        if self.triton_pieces:
            self._triton = dict(
                qk_rope=lambda p, qn, kn, cos, sin: decode_pieces.qk_rope(p, qn, kn, cos, sin, Hq, Hkv, eps,
                                                                          norm=has_qk_norm, r32=r32),
                add_norm=lambda x, p, w: decode_pieces.add_norm(x, p, w, eps),
                add_norm_pdl=lambda x, p, w: decode_pieces.add_norm(x, p, w, eps, pdl=True),
                qk_rope_pdl=lambda p, qn, kn, cos, sin: decode_pieces.qk_rope(p, qn, kn, cos, sin, Hq, Hkv, eps,
                                                                              pdl=True, norm=has_qk_norm, r32=r32))
        self._set_pieces(self._eager)

    def _residual_f32_pieces(self) -> dict:
        """The pieces of a float32 residual stream (``f32_residual``), as the trainer computes them
        (services/backend/residual.py: HF's modules over float32 hidden states): x float32; each GEMM reads
        model-dtype operands and writes float32 (``unembed.mm_f32``); an RMSNorm's normed value times its weight
        in float32, rounded to the model dtype once, as the next GEMM's input; q/k norm and rotary in float32,
        q, k, v rounded once for the cache and the attention; SiLU * up in float32, rounded as the down GEMM's
        input. The GEMM pieces (pre, post) stay eager (prefill only); decode runs ``_decode_split``."""
        s = self.shape
        eps, qd, kd, Hq, Hkv, D, Fd, dt = s.eps, self.qd, self.kd, s.heads, s.kv_heads, s.head_dim, s.ffn, self.dtype
        has_qk_norm = s.qk_norm
        mmf = unembed.mm_f32

        def norm_f32(x, w):   # HF's RMSNorm of a float32 input: float32 out
            return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

        def rmsnorm(x, w):
            return norm_f32(x, w).to(dt)

        def qkv_out(qkv, qn, kn, cos, sin):   # qkv float32 [N, qd + 2 kd] -> q, k, v in the model dtype
            qk = qkv[:, : qd + kd].reshape(-1, Hq + Hkv, D)
            if has_qk_norm:
                qk = norm_f32(qk, torch.cat((qn.expand(Hq, D), kn.expand(Hkv, D))))
            qk = rope(qk, cos[:, None, :], sin[:, None, :]).to(dt)
            return qk[:, :Hq], qk[:, Hq:], qkv[:, qd + kd:].reshape(-1, Hkv, D).to(dt)

        def silu_out(gu):
            return (F.silu(gu[:, :Fd]) * gu[:, Fd:]).to(dt)

        def pre(x, ln1, w_qkv, qn, kn, cos, sin):
            return qkv_out(mmf(rmsnorm(x, ln1), w_qkv), qn, kn, cos, sin)

        def post(x, o, w_o, ln2, w_gu, w_down):
            x = x + mmf(o.reshape(x.shape[0], qd), w_o)
            return x + mmf(silu_out(mmf(rmsnorm(x, ln2), w_gu)), w_down)

        def qk_rope(p, qn, kn, cos, sin):
            return qkv_out(skinny_gemm.reduce(p, torch.float32), qn, kn, cos, sin)

        def add_norm(x, p, w):
            x = x + skinny_gemm.reduce(p, torch.float32)
            return x, rmsnorm(x, w)

        def silu_mul(p):
            return silu_out(skinny_gemm.reduce(p, torch.float32))

        return dict(pre=pre, post=post, head=rmsnorm, rmsnorm=rmsnorm, qk_rope=qk_rope, add_norm=add_norm,
                    silu_mul=silu_mul)

    def _set_pieces(self, table: dict) -> None:
        for k, f in {**table, **self._triton}.items():
            setattr(self, k, f)
        if not self._triton:  # the torch pieces: no programmatic dependents
            self.add_norm_pdl, self.qk_rope_pdl = self.add_norm, self.qk_rope

    def enable_compile(self, on: bool = True) -> None:
        if not on:
            self._set_pieces(self._eager)
            self.compiled = False
            return
        import torch.fx.experimental._config as fx_config  # noqa: PLC0415  (compiler config: only when compiling)

        fx_config.use_duck_shape = False  # a batch that equals some head count must not add guards
        import torch._dynamo.config as dynamo_config  # noqa: PLC0415  (importing dynamo is slow: only when compiling)

        # one entry per model shape x (dynamic, size-1 specialisations): raise the per-function limit
        dynamo_config.cache_size_limit = max(dynamo_config.cache_size_limit, 64)
        dynamo_config.accumulated_cache_size_limit = max(dynamo_config.accumulated_cache_size_limit, 1024)
        c = lambda f: torch.compile(f, dynamic=True, fullgraph=True)  # noqa: E731
        # a float32 residual stream's GEMM pieces (torch.mm with out_dtype) stay eager: prefill only
        keep = ("pre", "post") if self.f32_residual else ()
        self._set_pieces({k: f if k in keep else c(f) for k, f in self._eager.items()})
        self.compiled = True

    def _probe_bmm_out_dtype(self) -> bool:
        if self.dtype == torch.float32:
            return False
        try:
            a = torch.ones(1, 2, 2, device=self.device, dtype=self.dtype)
            out = torch.bmm(a, a, out_dtype=torch.float32)
            return out.dtype == torch.float32
        except Exception:  # noqa: BLE001  (older torch / CPU without the overload)
            return False

    def memory_bytes(self) -> int:
        bufs = [self.embed, self.lm_head, self.norm, self.w_qkv, self.w_o, self.w_gu, self.w_down, self.ln1, self.ln2,
                self.qn, self.kn, self.kc, self.vc]
        return sum(t.numel() * t.element_size() for t in bufs)

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def load(self, parts) -> None:
        """Copy weights in place. ``parts`` is a ``weights.Qwen3Parts``-like object (a Llama's q/k norms are None)."""
        qd, kd, Fd = self.qd, self.kd, self.shape.ffn
        self.embed.copy_(parts.embed())
        self.lm_head.copy_(parts.lm_head())
        self.norm.copy_(parts.norm())
        for l in range(self.shape.layers):
            q, k, v, o, g, u, d, ln1, ln2, qn, kn = parts.layer(l)
            self.w_qkv[l, :qd].copy_(q)
            self.w_qkv[l, qd : qd + kd].copy_(k)
            self.w_qkv[l, qd + kd :].copy_(v)
            self.w_o[l].copy_(o)
            self.w_gu[l, :Fd].copy_(g)
            self.w_gu[l, Fd:].copy_(u)
            self.w_down[l].copy_(d)
            self.ln1[l].copy_(ln1)
            self.ln2[l].copy_(ln2)
            if self.shape.qk_norm:
                self.qn[l].copy_(qn)
                self.kn[l].copy_(kn)

    # ------------------------------------------------------------------ forward pieces
    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """ids [n, P] (right-padded), slots [n]: fills cache positions [0, P) of each slot.
        Returns the final-normed hidden states [n, P, H]."""
        s = self.shape
        n, P = ids.shape
        x = F.embedding(ids.reshape(-1), self.embed)                       # [n*P, H]
        if self.f32_residual:
            x = x.float()
        cos = self.cos[:P].repeat(n, 1)                                    # [n*P, D]
        sin = self.sin[:P].repeat(n, 1)
        for l in range(s.layers):
            q, k, v = self.pre(x, self.ln1[l], self.w_qkv[l], self.qn[l], self.kn[l], cos, sin)
            q = q.view(n, P, s.heads, s.head_dim).transpose(1, 2)
            k = k.view(n, P, s.kv_heads, s.head_dim).transpose(1, 2)
            v = v.view(n, P, s.kv_heads, s.head_dim).transpose(1, 2)
            self.kc[l][slots, :, :P] = k
            self.vc[l][slots, :, :P] = v
            if self.f32_attention:   # float32 scores, probabilities and P @ V; the output rounded for the o GEMM
                q, k, v = q.float(), k.float(), v.float()
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                               enable_gqa=self.group > 1).to(self.dtype)
            x = self.post(x, o.transpose(1, 2).reshape(n * P, self.qd), self.w_o[l], self.ln2[l], self.w_gu[l],
                          self.w_down[l])
        if self.f32_residual:
            return self.rmsnorm(x, self.norm).view(n, P, -1)
        return rms_norm(x, self.norm, s.eps).view(n, P, -1)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits of normed hidden states (a half-precision GEMM writing float32 where f32_logits: the
        trainer's unembedding too, services/backend/unembed.py)."""
        return linear_f32(hidden, self.lm_head) if self.f32_logits else F.linear(hidden, self.lm_head)

    def logits_of(self, y: torch.Tensor) -> torch.Tensor:
        """What a decode path's head piece returned -> logits (it returns the normed hidden states with f32_logits)."""
        return self.logits(y) if self.f32_logits else y

    @torch.no_grad()
    def copy_prefix(self, src: int, dst: torch.Tensor, length: int) -> None:
        """KV positions [0, length) of slot ``src`` into slots ``dst`` (prefix sharing)."""
        if dst.numel() == 0 or length == 0:
            return
        self.kc[:, dst, :, :length] = self.kc[:, src : src + 1, :, :length]
        self.vc[:, dst, :, :length] = self.vc[:, src : src + 1, :, :length]

    def _attend(self, q: torch.Tensor, l: int, b: int, ctx: int, bias: torch.Tensor,
                valid: torch.Tensor) -> torch.Tensor:
        s = self.shape
        K = self.kc[l][:b, :, :ctx]
        Vv = self.vc[l][:b, :, :ctx]
        if self.attention == "sdpa":
            o = F.scaled_dot_product_attention(q[:, :, None, :], K, Vv, attn_mask=valid[:, None, None, :],
                                               scale=self.scale, enable_gqa=self.group > 1)
            return o
        G, Hkv, D = self.group, s.kv_heads, s.head_dim
        qg = q.reshape(b * Hkv, G, D)
        Kf = K.reshape(b * Hkv, ctx, D)
        Vf = Vv.reshape(b * Hkv, ctx, D)
        if self._bmm_f32:
            sc = torch.bmm(qg, Kf.transpose(1, 2), out_dtype=torch.float32)
        else:
            sc = torch.bmm(qg, Kf.transpose(1, 2)).float()
        return torch.bmm(self.mid(sc, bias), Vf)  # [b * Hkv, G, D]

    def _decode_split(self, x: torch.Tensor, pos: torch.Tensor, ctx: int, cos: torch.Tensor, sin: torch.Tensor,
                      mm, silu, pdl=None, attend=None, head_mm=None) -> torch.Tensor:
        """The decode layers with split-K GEMMs (``mm``: skinny_gemm.mm up to MAX_ROWS rows, mm_tma above;
        ``silu``: the gate/up GEMM with SiLU * up, or None for ``mm`` and a SiLU * up piece) between the
        pieces that sum their partials (gemm and attention 'triton'): per layer 4 GEMMs + 3 elementwise
        kernels + 1-2 attention kernels, the GEMMs streaming their weights closer to the copy bandwidth
        than cuBLAS. ``pdl`` (``pdl_gemm``): (mm, silu) launched as programmatic dependents, which replace
        ``mm`` and ``silu``, with the pieces that are so launched too (``add_norm_pdl``, ``qk_rope_pdl``)."""
        s = self.shape
        b = x.shape[0]
        qk_rope, add_norm = self.qk_rope, self.add_norm
        if pdl:
            (mm, silu), qk_rope, add_norm = pdl, self.qk_rope_pdl, self.add_norm_pdl
        attend = attend or decode_attention.attend
        h = self.rmsnorm(x, self.ln1[0])
        for l in range(s.layers):
            q, k, v = qk_rope(mm(h, self.w_qkv[l]), self.qn[l], self.kn[l], cos, sin)
            o = attend(q, k, v, self.kc[l], self.vc[l], pos, ctx, self.scale)
            x, h = add_norm(x, mm(o.reshape(b, self.qd), self.w_o[l]), self.ln2[l])
            a = silu(h, self.w_gu[l]) if silu is not None else self.silu_mul(mm(h, self.w_gu[l]))
            x, h = add_norm(x, mm(a, self.w_down[l]), self.ln1[l + 1] if l + 1 < s.layers else self.norm)
        if self.f32_logits:   # float32 logits: the split GEMM writing float32 (``head_mm``), else torch.mm's
            return self.logits(h) if head_mm is None else skinny_gemm.reduce(head_mm(h, self.lm_head), torch.float32)
        return skinny_gemm.reduce(mm(h, self.lm_head), self.dtype)

    def _decode_mid(self, x: torch.Tensor, pos: torch.Tensor, ctx: int, cos: torch.Tensor,
                    sin: torch.Tensor) -> torch.Tensor:
        """The decode layers for MAX_ROWS < b <= TMA_ROWS without ``tma_gemm``: cuBLAS GEMMs inside the
        compiled pieces, the gate/up GEMM with SiLU * up (``mid_silu``) between them; one kernel fewer per
        layer than the fused pieces (the SiLU * up kernel)."""
        L = self.shape.layers
        q, k, v = self.pre(x, self.ln1[0], self.w_qkv[0], self.qn[0], self.kn[0], cos, sin)
        for l in range(L):
            o = decode_attention.attend(q, k, v, self.kc[l], self.vc[l], pos, ctx, self.scale)
            x, h = self.attn_out(x, o, self.w_o[l], self.ln2[l])
            a = self.mid_silu(h, self.w_gu[l])
            if l + 1 == L:
                break
            x, q, k, v = self.mlp_out_pre(x, a, self.w_down[l], self.ln1[l + 1], self.w_qkv[l + 1], self.qn[l + 1],
                                          self.kn[l + 1], cos, sin)
        return self.logits_of(self.mlp_out_head(x, a, self.w_down[L - 1], self.norm, self.lm_head))

    def _decode_f32_residual(self, x: torch.Tensor, pos: torch.Tensor, ctx: int, cos: torch.Tensor,
                             sin: torch.Tensor) -> torch.Tensor:
        """Decode with a float32 residual stream (``f32_residual``): the split-GEMM layer for every batch, its
        GEMMs writing float32 (skinny_gemm's kernels with ``f32`` where they serve the batch, else torch.mm with
        out_dtype), the pieces of ``_residual_f32_pieces`` (or decode_pieces' with ``r32``). With
        ``unembed.MATCHED_GEMM`` every GEMM is ``unembed.mm_f32``'s batch-invariant kernel, as on the trainer."""
        b = x.shape[0]
        mm, silu, pdl = unembed.mm_f32, None, None
        if unembed.MATCHED_GEMM:   # every GEMM the trainer's batch-invariant one (unembed.mm_f32), no split kernels
            pass
        elif self.gemm == "triton" and b <= skinny_gemm.MAX_ROWS:
            mm = partial(self.skinny_mm, f32=True)
            silu = partial(self.skinny_silu, f32=True) if self.fuse_silu else None
        elif self.gemm == "triton" and self.mid_silu is not None and self.tma_gemm and b <= skinny_gemm.TMA_ROWS:
            mm, silu = partial(self.mid_mm, f32=True), partial(self.mid_silu, f32=True)
            if self.pdl_gemm:
                pdl = (partial(self.mid_mm_pdl, f32=True), partial(self.mid_silu_pdl, f32=True))
        attend = decode_attention.attend if self.attention == "triton" else decode_attention.attend_reference
        if self.f32_attention:
            attend = partial(attend, p32=True)
        return self._decode_split(x, pos, ctx, cos, sin, mm, silu, pdl, attend, head_mm=mm)

    @torch.no_grad()
    def decode(self, tok: torch.Tensor, pos: torch.Tensor, ctx: int) -> torch.Tensor:
        """tok, pos: [b] (slots 0..b-1). Writes K/V at ``pos`` and returns logits [b, V]."""
        s = self.shape
        b = tok.shape[0]
        x = F.embedding(tok, self.embed)
        cos, sin = self.cos[pos], self.sin[pos]
        if self.f32_residual:
            return self._decode_f32_residual(x.float(), pos, ctx, cos, sin)
        if self.gemm == "triton" and self.attention == "triton" and b <= skinny_gemm.MAX_ROWS:
            return self._decode_split(x, pos, ctx, cos, sin, self.skinny_mm,
                                      self.skinny_silu if self.fuse_silu else None,
                                      head_mm=partial(self.skinny_mm, f32=True) if self.f32_logits else None)
        if (self.attention == "triton" and self.fuse_silu and self.mid_silu is not None
                and b <= skinny_gemm.TMA_ROWS):
            if self.tma_gemm:
                return self._decode_split(x, pos, ctx, cos, sin, self.mid_mm, self.mid_silu,
                                          (self.mid_mm_pdl, self.mid_silu_pdl) if self.pdl_gemm else None,
                                          head_mm=partial(self.mid_mm, f32=True) if self.f32_logits else None)
            return self._decode_mid(x, pos, ctx, cos, sin)
        fused = self.attention == "triton"
        if not fused:
            valid = self.ar_ctx[:ctx][None, :] <= pos[:, None]
            bias = torch.zeros(b, 1, 1, ctx, device=self.device, dtype=torch.float32).masked_fill(
                ~valid[:, None, None, :], float("-inf"))
            ar = self.ar_slots[:b]
        def pre_w(l):
            return self.ln1[l], self.w_qkv[l], self.qn[l], self.kn[l]

        q, k, v = self.pre(x, *pre_w(0), cos, sin)
        for l in range(s.layers):
            if fused:  # writes k/v at pos and attends over [0, pos] of each row
                o = decode_attention.attend(q, k, v, self.kc[l], self.vc[l], pos, ctx, self.scale)
            else:
                self.kc[l].permute(0, 2, 1, 3)[ar, pos] = k
                self.vc[l].permute(0, 2, 1, 3)[ar, pos] = v
                o = self._attend(q, l, b, ctx, bias, valid)
            mlp = (self.w_o[l], self.ln2[l], self.w_gu[l], self.w_down[l])
            if l + 1 == s.layers:
                break
            if self.fuse_layers:
                x, q, k, v = self.post_pre(x, o, *mlp, *pre_w(l + 1), cos, sin)
            else:
                x = self.post(x, o, *mlp)
                q, k, v = self.pre(x, *pre_w(l + 1), cos, sin)
        if self.fuse_layers:
            return self.logits_of(self.post_head(x, o, *mlp, self.norm, self.lm_head))
        return self.logits_of(self.head(self.post(x, o, *mlp), self.norm, self.lm_head))
