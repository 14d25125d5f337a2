"""StaticEngine: continuous-batching sampler over a static per-slot KV cache.

Slots ``0..max_slots-1`` each hold one sequence's KV cache (up to ``max_context`` tokens). A
request (``SampleSpec``) is admitted when enough slots are free for its ``num_samples``
sequences (larger groups are split): its prompt is prefilled once into the first slot, the KV
prefix is copied to the group's other slots, and its first tokens are drawn from the prefill's
last logits. Then all live sequences decode together, one token per step, in a batch that
covers slots ``0..b-1`` (``b`` the smallest bucket above the highest live slot; freed slots are
refilled lowest-first). New requests are admitted between steps (``poll``), so a long-running
decode loop serves requests that arrive while it runs.

On CUDA the decode step (model + sampling + buffer updates) is captured once per (batch bucket,
context bucket, filtered) in a CUDA graph sharing one memory pool, and replayed; each step then
costs one graph launch and one small device-to-host copy. Without CUDA the same step runs eagerly.
"""

from __future__ import annotations

import bisect
import gc
import logging
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from ..sampler import SampleResult, SampleSpec, _hit_stop_string
from . import sampling, skinny_gemm
from .qwen3 import Qwen3Shape, StaticQwen3
from .sampling import choose
from .weights import Qwen3Parts

log = logging.getLogger("backend.gpu.engine")

_MASK63 = (1 << 63) - 1


def _batch_buckets(max_slots: int) -> list[int]:
    out, b = [], 1
    while b < 8:
        out.append(b)
        b *= 2
    b = 8
    while b < max_slots:
        out.append(b)
        b += 8 if b < 64 else 16 if b < 256 else 64
    out.append(max_slots)
    return sorted(set(x for x in out if x <= max_slots))


def _ctx_bucket(n: int, limit: int) -> int:
    g = 128 if n <= 2048 else 512 if n <= 8192 else 2048
    return min(-(-n // g) * g, limit)


@dataclass
class EngineOptions:
    max_slots: int = 64
    max_context: int = 4096
    prefill_tokens: int = 16384          # padded prompt tokens per prefill forward
    cuda_graphs: bool | None = None      # None: on CUDA only
    compile: bool | None = None          # torch.compile the elementwise pieces (None: on CUDA only)
    attention: str = "auto"              # auto (triton on CUDA) | triton | bmm | sdpa (decode attention)
    overlap: bool | None = None          # launch step k+1 before recording step k's tokens (None: with graphs)
    fuse_layers: bool = True             # one compiled piece across each layer boundary (False: the issue-20 split)
    gemm: str = "auto"                   # decode GEMMs: auto (triton on CUDA) | triton (split-K, <= 16 rows) | torch
    fuse_silu: bool = True               # gemm triton: SiLU * up in the gate/up GEMM (<= 64 rows; False: own kernel)
    triton_pieces: bool = True           # gemm triton: q/k norm + rotary and add + RMSNorm as single Triton launches
    tma_gemm: bool = True                # gemm triton, 17-64 rows on Hopper: every GEMM through TMA (False: cuBLAS)
    pdl_gemm: bool = True                # tma_gemm (Hopper): its GEMMs and pieces as programmatic dependents (PDL)
    token_choice: str = "auto"           # auto (kernel on CUDA) | kernel (sampling.choose_kernel, no top-k/p) | torch

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "EngineOptions":
        d = dict(d or {})
        known = {k: d.pop(k) for k in list(d) if k in cls.__dataclass_fields__}
        if d:
            log.warning("ignoring unknown sampler options %s", sorted(d))
        return cls(**known)


@dataclass
class _Req:
    spec: SampleSpec
    result: SampleResult
    seqs: list["_Seq"] = field(default_factory=list)
    remaining: int = 0
    callback: Callable[[SampleResult], None] | None = None
    index: int = -1


@dataclass
class _Seq:
    req: _Req
    k: int                  # sample index within the request
    seed: int
    slot: int = -1
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    done: str | None = None
    pos: int = 0            # tokens in this slot's cache


@dataclass
class _Step:
    rows: list[tuple[int, "_Seq"]]   # (slot, its sequence at launch)
    b: int
    buf: int                         # which host buffer receives its tokens
    done: Any                        # CUDA event after the copy (None without CUDA graphs)


def cuda_memory(device: torch.device) -> str:
    """'; cuda allocated A GB, reserved R GB, in use U GB' (U: the whole device, other processes too) on
    CUDA, '' elsewhere: reserved growing while allocated stays flat is the caching allocator's
    fragmentation, allocated growing is a reference kept. At DEBUG also the largest live CUDA
    tensors by (shape, dtype), to find what is kept."""
    if device.type != "cuda":
        return ""
    free, total = torch.cuda.mem_get_info(device)
    out = (f"; cuda allocated {torch.cuda.memory_allocated(device) / 1e9:.1f} GB, reserved "
           f"{torch.cuda.memory_reserved(device) / 1e9:.1f} GB, in use {(total - free) / 1e9:.1f} GB")
    if log.isEnabledFor(logging.DEBUG):
        try:
            out += _live_cuda_tensors()
        except Exception as e:  # noqa: BLE001  (a diagnostic never fails the sampling round)
            out += f"; live-tensor census failed: {type(e).__name__}: {e}"
    return out


def _live_cuda_tensors() -> str:
    """The live CUDA tensors (plain tensors, each storage once) by (shape, dtype), largest first."""
    sizes: dict[tuple, list[int]] = {}
    seen: set[int] = set()
    for o in gc.get_objects():
        # plain tensors only (torch.compile's fake tensors have symbolic shapes), each storage once
        if type(o) in (torch.Tensor, torch.nn.Parameter) and o.is_cuda and o.untyped_storage().data_ptr() not in seen:
            seen.add(o.untyped_storage().data_ptr())
            e = sizes.setdefault((tuple(int(d) for d in o.shape), str(o.dtype)), [0, 0])
            e[0] += 1
            e[1] += o.untyped_storage().nbytes()
    top = sorted(sizes.items(), key=lambda kv: -kv[1][1])[:10]
    return (f"; live tensors {sum(b for _, b in sizes.values()) / 1e9:.1f} GB in {len(seen)} storages, largest: "
            + ", ".join(f"{n}x{list(k[0])} {k[1][6:]} {b / 1e9:.2f} GB" for k, (n, b) in top))


def _choose_plain(logits, temp, topk, topp, seed, step, vidx):
    return choose(logits, temp, topk, topp, seed, step, vidx, False)


class StaticEngine:
    def __init__(self, shape: Qwen3Shape, device: torch.device | str, dtype: torch.dtype, opts: EngineOptions):
        self.shape, self.device, self.dtype, self.opts = shape, torch.device(device), dtype, opts
        self.model = StaticQwen3(shape, self.device, dtype, opts.max_slots, opts.max_context, opts.attention,
                                 opts.fuse_layers, opts.gemm, opts.fuse_silu,
                                 opts.triton_pieces, opts.tma_gemm, opts.pdl_gemm)
        S, dev = opts.max_slots, self.device
        on_cuda = self.device.type == "cuda"
        self.use_graphs = on_cuda if opts.cuda_graphs is None else bool(opts.cuda_graphs and on_cuda)
        # host mirrors and device buffers of per-slot state
        self.h = {"tok": np.zeros(S, np.int64), "pos": np.zeros(S, np.int64), "step": np.zeros(S, np.int64),
                  "seed": np.zeros(S, np.int64), "topk": np.zeros(S, np.int64), "active": np.zeros(S, np.int64),
                  "temp": np.ones(S, np.float32), "topp": np.ones(S, np.float32)}
        self.d = {k: torch.from_numpy(v.copy()).to(dev) for k, v in self.h.items()}
        self.o_tok = torch.zeros(S, dtype=torch.int64, device=dev)
        self.o_lp = torch.zeros(S, dtype=torch.float32, device=dev)
        pin = self.device.type == "cuda"
        # two host buffers for the sampled tokens: step k+1's are copied while step k's are read
        self.p_tok = [torch.zeros(S, dtype=torch.int64, pin_memory=pin) for _ in range(2)]
        self.p_lp = [torch.zeros(S, dtype=torch.float32, pin_memory=pin) for _ in range(2)]
        self.overlap = self.use_graphs if opts.overlap is None else bool(opts.overlap)
        self._inflight: _Step | None = None
        self._flip = 0
        self.vidx = torch.arange(shape.vocab, device=dev)
        self.buckets = _batch_buckets(S)
        self.slot_seq: list[_Seq | None] = [None] * S
        self.free: list[int] = list(range(S))    # kept sorted: lowest first
        self.graphs: dict[tuple[int, int, bool], torch.cuda.CUDAGraph] = {}
        self._pool = None
        self.weights_id: Any = None
        self.stats = {"steps": 0, "prefill_s": 0.0, "decode_s": 0.0, "graph_captures": 0, "capture_s": 0.0,
                      "tokens": 0, "weight_loads": 0, "weight_load_s": 0.0}
        self._dirty = True
        self._choose = choose
        self.token_choice = self.resolve_token_choice(opts.token_choice, self.device)
        if self.token_choice == "kernel":
            self._choose = self._choose_kernel
        want_compile = (self.device.type == "cuda") if opts.compile is None else bool(opts.compile)
        if want_compile:
            self._enable_compile()

    @staticmethod
    def resolve_token_choice(mode: str, device: torch.device) -> str:
        """'kernel' (sampling.choose_kernel for batches without top-k/top-p: two launches, the fastest
        measured, docs/performance.md), 'torch' (sampling.choose, compiled with the pieces); 'auto' =
        kernel on CUDA where Triton is installed, else torch."""
        if mode not in ("auto", "kernel", "torch"):
            raise ValueError(f"token_choice must be auto, kernel or torch, got {mode!r}")
        if mode == "kernel" and not (device.type == "cuda" and sampling.available()):
            raise ValueError("token_choice 'kernel' needs CUDA and the triton package")
        if mode == "auto":
            return "kernel" if device.type == "cuda" and sampling.available() else "torch"
        return mode

    @staticmethod
    def _choose_kernel(logits, temp, topk, topp, seed, step, vidx, filtered):
        if filtered:  # top-k / top-p rows: the sort-based torch function, eager
            return choose(logits, temp, topk, topp, seed, step, vidx, True)
        return sampling.choose_kernel(logits, temp, topk, seed, step)

    def _enable_compile(self) -> None:
        """Compile the fusable pieces now (a 3-token prefill and a 3-row decode step trigger it), so
        that graph capture never compiles; on failure fall back to eager pieces. With token_choice
        'torch', token choice is compiled for the unfiltered case only (Inductor 2.11 fails on the
        sort/cumsum top-p variant with dynamic shapes); top-k/top-p rows run it eagerly inside the
        same CUDA graph."""
        t0 = time.perf_counter()
        dev = self.device
        n = min(3, self.opts.max_slots)  # 3: no 0/1 specialisation (fewer rows than the cache has slots never)
        z = lambda: torch.zeros(n, dtype=torch.int64, device=dev)  # noqa: E731
        try:
            self.model.enable_compile(True)
            with torch.no_grad():
                self.model.prefill(torch.zeros(1, 3, dtype=torch.int64, device=dev),
                                   torch.zeros(1, dtype=torch.int64, device=dev))
                self._smoke_logits = self.model.decode(z(), z(), 128)
                # batches above the split-K GEMM's rows take other pieces (mm_silu_tma's, then the fused ones)
                for wide in (skinny_gemm.MAX_ROWS + 1, skinny_gemm.TMA_ROWS + 1):
                    if self.model.gemm == "triton" and self.opts.max_slots >= wide:
                        zw = torch.zeros(wide, dtype=torch.int64, device=dev)
                        self.model.decode(zw, zw, 128)
        except Exception as e:  # noqa: BLE001
            log.warning("static engine: torch.compile of the model failed (%s: %s); eager pieces", type(e).__name__, e)
            self.model.enable_compile(False)
            self.stats["compile_error"] = f"model: {type(e).__name__}: {e}"[:300]
        try:
            if self.token_choice == "torch":
                plain = torch.compile(_choose_plain, dynamic=True)
                with torch.no_grad():
                    lg = self.model.decode(z(), z(), 128)
                    plain(lg, torch.ones(n, device=dev), z() - 1, torch.ones(n, device=dev), z(), z(), self.vidx)
                self._choose = lambda *a: plain(*a[:-1]) if not a[-1] else choose(*a)
        except Exception as e:  # noqa: BLE001
            log.warning("static engine: torch.compile of sampling failed (%s: %s); eager", type(e).__name__, e)
            self._choose = choose
            self.stats["compile_error_sampling"] = f"{type(e).__name__}: {e}"[:300]
        self.stats["compile_s"] = time.perf_counter() - t0
        log.info("static engine: compiled the fused pieces in %.1fs", self.stats["compile_s"])

    # ------------------------------------------------------------------ weights
    def load_weights(self, weights_id: Any, module: torch.nn.Module, adapter: str | None = None) -> None:
        if weights_id == self.weights_id:
            return
        t0 = time.perf_counter()
        self.weights_id = None
        self.model.load(Qwen3Parts(module, adapter))
        self.weights_id = weights_id
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dt = time.perf_counter() - t0
        self.stats["weight_loads"] += 1
        self.stats["weight_load_s"] += dt
        log.info("static engine: weights %s loaded%s in %.3fs", weights_id, " (LoRA merged)" if adapter else "", dt)

    def fits(self, spec: SampleSpec) -> bool:
        return 0 < len(spec.prompt) and len(spec.prompt) + max(spec.max_tokens, 1) - 1 <= self.opts.max_context

    # ------------------------------------------------------------------ public entry
    def generate(self, specs: list[SampleSpec], tokenizer,
                 poll: Callable[[], list[tuple[SampleSpec, Callable]]] | None = None
                 ) -> list[SampleResult]:
        """Sample every spec (each must ``fits``). ``poll()``, if given, is called between decode
        steps and returns further (spec, callback) pairs to serve in the same loop; their results
        go to the callbacks as they finish."""
        reqs = [self._new_req(s, i) for i, s in enumerate(specs)]
        pending: deque[tuple[_Req, list[_Seq]]] = deque()
        for r in reqs:
            self._enqueue(r, pending)
        self.tokenizer = tokenizer
        live = 0
        t0, st0 = time.perf_counter(), dict(self.stats)
        while pending or live:
            if poll is not None:
                for spec, cb in poll() or []:
                    r = self._new_req(spec, -1)
                    r.callback = cb
                    self._enqueue(r, pending)
            if pending and self.free:
                self._drain()  # a freed slot is refilled only once no launched step still writes it
                self._admit(pending)
            live = sum(1 for s in self.slot_seq if s is not None)
            if live:
                self._decode_step()
                live = sum(1 for s in self.slot_seq if s is not None)
            elif pending and not self.free:  # cannot happen: no live sequence means every slot is free
                raise RuntimeError("static engine: no free slot and nothing running")
        st = {k: self.stats[k] - st0[k] for k in ("tokens", "steps", "prefill_s", "decode_s")}
        log.info("static engine: %d tokens decoded in %.2fs (prefill %.2fs, %d decode steps %.2fs)%s", st["tokens"],
                 time.perf_counter() - t0, st["prefill_s"], st["steps"], st["decode_s"], cuda_memory(self.device))
        return [r.result for r in reqs]

    def _new_req(self, spec: SampleSpec, index: int) -> _Req:
        if not self.fits(spec):
            raise ValueError(f"prompt of {len(spec.prompt)} tokens + max_tokens {spec.max_tokens} exceed the static "
                             f"engine's context {self.opts.max_context}")
        r = _Req(spec, SampleResult(sequences=[]), index=index)
        for k in range(spec.num_samples):
            if spec.seed is not None:
                seed = (int(spec.seed) * 1_000_003 + k) & _MASK63
            else:
                seed = random.getrandbits(63)
            r.seqs.append(_Seq(r, k, seed))
        r.remaining = len(r.seqs)
        return r

    def _enqueue(self, r: _Req, pending: deque) -> None:
        S = self.opts.max_slots
        for i in range(0, len(r.seqs), S):
            pending.append((r, r.seqs[i : i + S]))

    # ------------------------------------------------------------------ prefill / admission
    def _admit(self, pending: deque) -> None:
        """Take groups from the queue while slots are free; prefill them in padded batches."""
        batch: list[tuple[_Req, list[_Seq]]] = []
        nfree = len(self.free)
        while pending and len(pending[0][1]) <= nfree:
            r, seqs = pending.popleft()
            nfree -= len(seqs)
            batch.append((r, seqs))
        if not batch:
            return
        t0 = time.perf_counter()
        batch.sort(key=lambda g: len(g[0].spec.prompt))
        chunk: list[tuple[_Req, list[_Seq]]] = []
        for g in batch:
            P = len(g[0].spec.prompt)
            if chunk and P * (len(chunk) + 1) > self.opts.prefill_tokens:
                self._prefill(chunk)
                chunk = []
            chunk.append(g)
        if chunk:
            self._prefill(chunk)
        self.stats["prefill_s"] += time.perf_counter() - t0

    def _take_slots(self, n: int) -> list[int]:
        out, self.free = self.free[:n], self.free[n:]
        return out

    @torch.no_grad()
    def _prefill(self, groups: list[tuple[_Req, list[_Seq]]]) -> None:
        dev, m = self.device, self.model
        P = max(len(r.spec.prompt) for r, _ in groups)
        ids = torch.zeros(len(groups), P, dtype=torch.int64)
        for i, (r, _) in enumerate(groups):
            ids[i, : len(r.spec.prompt)] = torch.tensor(r.spec.prompt, dtype=torch.int64)
        slots_per = [self._take_slots(len(seqs)) for _, seqs in groups]
        first = torch.tensor([s[0] for s in slots_per], dtype=torch.int64, device=dev)
        hidden = m.prefill(ids.to(dev), first)
        lens = torch.tensor([len(r.spec.prompt) for r, _ in groups], device=dev)
        last = m.logits(hidden[torch.arange(len(groups), device=dev), lens - 1])  # [n, V]
        rows, row_src = [], []
        for i, ((r, seqs), slots) in enumerate(zip(groups, slots_per)):
            Pi = len(r.spec.prompt)
            m.copy_prefix(slots[0], torch.tensor(slots[1:], dtype=torch.int64, device=dev), Pi)
            if (r.spec.prompt_logprobs or r.spec.topk_prompt_logprobs) and seqs[0].k == 0:
                self._prompt_logprobs(r, hidden[i, :Pi])
            for sq, slot in zip(seqs, slots):
                sq.slot, sq.pos = slot, Pi
                self.slot_seq[slot] = sq
                rows.append(sq)
                row_src.append(i)
        # first token of every sequence from the prompt's last logits (step 0 of its stream)
        sp = [r.req.spec for r in rows]
        src = torch.tensor(row_src, device=dev)
        temp = torch.tensor([s.temperature for s in sp], dtype=torch.float32, device=dev)
        topk = torch.tensor([s.top_k for s in sp], dtype=torch.int64, device=dev)
        topp = torch.tensor([s.top_p for s in sp], dtype=torch.float32, device=dev)
        seed = torch.tensor([r.seed for r in rows], dtype=torch.int64, device=dev)
        step = torch.zeros(len(rows), dtype=torch.int64, device=dev)
        filtered = any((s.top_k > 1) or (s.top_p < 1.0) for s in sp)
        tok, lp = self._choose(last.index_select(0, src), temp, topk, topp, seed, step, self.vidx, filtered)
        tok, lp = tok.cpu().tolist(), lp.cpu().tolist()
        for sq, t, l in zip(rows, tok, lp):
            s = sq.req.spec
            self.h["temp"][sq.slot], self.h["topk"][sq.slot], self.h["topp"][sq.slot] = s.temperature, s.top_k, s.top_p
            self.h["seed"][sq.slot] = sq.seed
            self.h["step"][sq.slot] = 1
            self._record(sq, t, l)
        self._dirty = True

    def _prompt_logprobs(self, r: _Req, hidden: torch.Tensor) -> None:
        s = r.spec
        P = len(s.prompt)
        first_scored = 1 if not s.prompt_logprobs_last_n else max(1, P - s.prompt_logprobs_last_n)
        pl = np.full(P, np.nan, dtype=np.float32)
        k = s.topk_prompt_logprobs
        tids = np.zeros((P, k), dtype=np.int32) if k else None
        tlps = np.full((P, k), -99999.0, dtype=np.float32) if k else None
        tgt = torch.tensor(s.prompt[1:], device=self.device)
        for a in range(0, P - 1, 1024):  # position j predicts prompt[j+1]; chunked over the vocab-sized rows
            b = min(P - 1, a + 1024)
            lsm = torch.log_softmax(self.model.logits(hidden[a:b]).float(), dim=-1)
            if s.prompt_logprobs:
                pl[a + 1 : b + 1] = lsm.gather(-1, tgt[a:b, None])[:, 0].cpu().numpy()
            if k:
                v, t = torch.topk(lsm, k=min(k, lsm.shape[-1]), dim=-1)
                tids[a + 1 : b + 1, : v.shape[1]] = t.cpu().numpy()
                tlps[a + 1 : b + 1, : v.shape[1]] = v.cpu().numpy()
        if s.prompt_logprobs:
            pl[:first_scored] = np.nan
            r.result.prompt_logprobs = pl
        if k:
            tids[:first_scored] = 0
            tlps[:first_scored] = -99999.0
            r.result.topk_prompt = (tids, tlps)

    # ------------------------------------------------------------------ bookkeeping
    def _record(self, sq: _Seq, t: int, lp: float) -> None:
        s = sq.req.spec
        sq.tokens.append(t)
        sq.logprobs.append(lp)
        if t in s.stop_token_ids:
            sq.done = "stop"
        elif s.stop_strings and _hit_stop_string(self.tokenizer, sq.tokens, s.stop_strings):
            sq.done = "stop"
        elif len(sq.tokens) >= s.max_tokens:
            sq.done = "length"
        slot = sq.slot
        if sq.done is None:
            self.h["tok"][slot], self.h["pos"][slot], self.h["active"][slot] = t, sq.pos, 1
            return
        self.slot_seq[slot] = None
        bisect.insort(self.free, slot)
        self.h["active"][slot], self.h["pos"][slot], self.h["tok"][slot] = 0, 0, 0
        self._dirty = True
        r = sq.req
        r.remaining -= 1
        if r.remaining == 0:
            r.result.sequences = [(q.tokens, q.logprobs, q.done or "length") for q in r.seqs]
            if r.callback is not None:
                r.callback(r.result)

    # ------------------------------------------------------------------ decode
    def _upload(self) -> None:
        for k, v in self.h.items():
            self.d[k].copy_(torch.from_numpy(v), non_blocking=False)
        self._dirty = False

    def _step_fn(self, b: int, ctx: int, filtered: bool) -> None:
        d = self.d
        tok, pos = d["tok"][:b], d["pos"][:b]
        logits = self.model.decode(tok, pos, ctx)
        t, lp = self._choose(logits, d["temp"][:b], d["topk"][:b], d["topp"][:b], d["seed"][:b], d["step"][:b],
                             self.vidx, filtered)
        self.o_tok[:b].copy_(t)
        self.o_lp[:b].copy_(lp)
        act = d["active"][:b]
        tok.copy_(torch.where(act > 0, t, tok))
        pos.add_(act).clamp_(max=self.opts.max_context - 1)
        d["step"][:b].add_(act)

    def _graph(self, b: int, ctx: int, filtered: bool):
        key = (b, ctx, filtered)
        g = self.graphs.get(key)
        if g is not None:
            return g
        t0 = time.perf_counter()
        saved = {k: self.d[k].clone() for k in ("tok", "pos", "step")}
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s), torch.no_grad():
            self._step_fn(b, ctx, filtered)  # warm-up (allocator, cuBLAS handles, kernel selection)
        torch.cuda.current_stream(self.device).wait_stream(s)
        for k, v in saved.items():
            self.d[k].copy_(v)
        g = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(g, pool=self._pool):
            self._step_fn(b, ctx, filtered)
        torch.cuda.synchronize(self.device)
        for k, v in saved.items():  # capture does not run kernels; restore anyway for safety
            self.d[k].copy_(v)
        self.graphs[key] = g
        self.stats["graph_captures"] += 1
        self.stats["capture_s"] += time.perf_counter() - t0
        return g

    def _launch(self, ahead: int) -> "_Step":
        """Start one decode step of the live slots. ``ahead``: steps already launched but not yet
        recorded (their positions are one further on the device than in the host mirror)."""
        live = [i for i, s in enumerate(self.slot_seq) if s is not None]
        b = self.buckets[bisect.bisect_left(self.buckets, live[-1] + 1)]
        ctx = _ctx_bucket(int(self.h["pos"][live].max()) + 1 + ahead, self.opts.max_context)
        filtered = bool(((self.h["topk"][live] > 1) | (self.h["topp"][live] < 1.0)).any())
        if self._dirty:
            self._upload()
        buf, self._flip = self._flip, 1 - self._flip
        if self.use_graphs:
            self._graph(b, ctx, filtered).replay()
            self.p_tok[buf][:b].copy_(self.o_tok[:b], non_blocking=True)
            self.p_lp[buf][:b].copy_(self.o_lp[:b], non_blocking=True)
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
        else:
            self._step_fn(b, ctx, filtered)
            self.p_tok[buf][:b].copy_(self.o_tok[:b])
            self.p_lp[buf][:b].copy_(self.o_lp[:b])
            done = None
        return _Step([(i, self.slot_seq[i]) for i in live], b, buf, done)

    def _finish(self, st: "_Step") -> None:
        """Record a launched step's tokens (rows whose sequence ended at an earlier step are skipped:
        a step launched ahead computed them in vain)."""
        if st.done is not None:
            st.done.synchronize()
        toks, lps = self.p_tok[st.buf][: st.b].numpy(), self.p_lp[st.buf][: st.b].numpy()
        n = 0
        for i, sq in st.rows:
            if self.slot_seq[i] is not sq:
                continue
            sq.pos += 1
            self.h["step"][i] += 1
            self._record(sq, int(toks[i]), float(lps[i]))
            n += 1
        self.stats["steps"] += 1
        self.stats["tokens"] += n

    def _drain(self) -> None:
        if self._inflight is not None:
            st, self._inflight = self._inflight, None
            self._finish(st)

    @torch.no_grad()
    def _decode_step(self) -> None:
        """One step. With ``overlap`` the next step is launched before this one's tokens are recorded
        (the graph itself advances each row's token, position and stream counter on the device), so
        the host's bookkeeping runs while the GPU decodes; not when a row is known to end here
        (its max_tokens) or the batch must change (``_dirty``): then the step after waits for it."""
        t0 = time.perf_counter()
        cur = self._inflight or self._launch(0)
        self._inflight = None
        if self.overlap and not self._dirty and not any(
                len(sq.tokens) + 1 >= sq.req.spec.max_tokens for _, sq in cur.rows):
            self._inflight = self._launch(1)
        self._finish(cur)
        if self._inflight is not None and self._dirty:
            self._drain()  # a row ended by a stop token: the step launched ahead is recorded before the batch changes
        self.stats["decode_s"] += time.perf_counter() - t0
