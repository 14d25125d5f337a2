"""Batched sampling with a KV cache, across many concurrent requests.

All requests handed to ``generate`` share one set of weights. Their prompts are prefilled
once each (left-padded into one batch; identical prompts share one prefill row), the cache
rows are repeated for ``num_samples``, and then every sequence decodes in lock-step with
per-row temperature / top-k / top-p / seed / stop conditions. Finished rows are dropped from
the batch as they finish.

Returned ``logprobs`` are log p(token) under the model's own distribution (temperature 1,
no top-k/top-p truncation), i.e. exactly what the trainer's ``forward`` computes for the
same tokens. That is what importance ratios in RL need; temperature only changes which
tokens are drawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from . import unembed
from .hf_decode import GrowingCache, use_gqa_decode
from .unembed import head_logits


@dataclass
class SampleSpec:
    prompt: list[int]
    num_samples: int = 1
    max_tokens: int = 256
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: set[int] = field(default_factory=set)
    stop_strings: list[str] = field(default_factory=list)
    prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0
    prompt_logprobs_last_n: int | None = None
    row_offset: int = 0        # a chunk of a larger request: its first row's index there (seeds)
    # Resuming a preempted row (num_samples 1): the tokens/logprobs it has (already at the end of
    # ``prompt``) and its seeded stream. ``should_yield()``: stop decoding early when it says so.
    prefix: tuple[list[int], list[float]] | None = None
    resume_gen: Any = field(default=None, compare=False, repr=False)
    should_yield: Callable[[], bool] | None = field(default=None, compare=False, repr=False)


@dataclass
class SampleResult:
    sequences: list[tuple[list[int], list[float], str]]  # (tokens, logprobs, stop_reason)
    prompt_logprobs: np.ndarray | None = None            # [len(prompt)], NaN where unscored
    topk_prompt: tuple[np.ndarray, np.ndarray] | None = None  # ([P, k] ids, [P, k] logprobs)
    cache_hit_tokens: int = 0
    resume: dict[int, Any] = field(default_factory=dict)  # preempted sequence index -> its seeded stream


MIN_STEPS_BEFORE_YIELD = 16   # a yielding wave still makes this much progress


@dataclass
class _Row:
    spec_idx: int
    gen: random.Random | None  # the row's own stream when the request has a seed
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    done: str | None = None


def generate(module, tokenizer, specs: list[SampleSpec], device: torch.device,
             max_rows: int = 256) -> list[SampleResult]:
    results = [SampleResult(sequences=[]) for _ in specs]
    use_gqa_decode(module)
    # Split into waves of at most max_rows sampled sequences (bounded memory).
    # A wave that yielded (``should_yield``) leaves the later waves' rows preempted, unstarted.
    waves: list[list[int]] = [[]]
    rows = 0
    for i, s in enumerate(specs):
        if waves[-1] and rows + s.num_samples > max_rows:
            waves.append([])
            rows = 0
        waves[-1].append(i)
        rows += s.num_samples
    yielded = False
    for wave in waves:
        if yielded:
            for i in wave:
                s = specs[i]
                tokens, lps = s.prefix or ([], [])
                for k in range(s.num_samples):
                    results[i].sequences.append((list(tokens), list(lps), "preempted"))
                    results[i].resume[k] = s.resume_gen
        elif wave:
            yielded = _generate_wave(module, tokenizer, specs, wave, results, device)
    return results


# Prompt logprobs: positions per lm_head + log-softmax chunk, one [chunk, vocab] float32 buffer within this budget.
# CHUNKED_PROMPT_LOGPROBS False: the previous path (the model's full logits), bench/bench_memory.py's baseline.
PROMPT_LOGITS_CHUNK_BYTES = {"cuda": 1 << 30, "cpu": 128 << 20}
CHUNKED_PROMPT_LOGPROBS = True


def logits_chunk_tokens(budgets: dict[str, int], vocab: int, device: torch.device, lo: int, hi: int) -> int:
    """Positions per lm_head + log-softmax chunk: one [chunk, vocab] float32 buffer within the device's budget
    (``budgets``: device type -> bytes; "cpu" for any other), between ``lo`` and ``hi``. Shared with the trainer's
    logprobs (logprobs.chunk_tokens_for)."""
    budget = budgets.get(device.type, budgets["cpu"])
    return int(min(hi, max(lo, budget // (4 * max(vocab, 1)))))


def _logits_chunk(vocab: int, device: torch.device) -> int:
    return logits_chunk_tokens(PROMPT_LOGITS_CHUNK_BYTES, vocab, device, 16, 4096)


# The prefill's attention scores ([rows, heads, queries, keys] float32, with a softmax copy and the mask beside them)
# within this budget: a wave's left-padded prompts are prefilled in groups of rows and chunks of query positions
# (issue 37: 16 prompts x 3000 tokens in one pass held ~1 GB of scores on the tiny model; the quick start's PPO line
# drove the backend to 7 GB). PREFILL_IN_PIECES False: one pass whatever its size (bench_memory's baseline).
PREFILL_ATTENTION_BYTES = {"cuda": 4 << 30, "cpu": 128 << 20}
PREFILL_IN_PIECES = True
MIN_QUERY_CHUNK = 128


def _prefill_plan(n_rows: int, L: int, S: int, config, device: torch.device) -> tuple[int, int]:
    """(rows per group, query positions per chunk) of the prefill of ``n_rows`` prompts of L own tokens after S
    shared ones: all at once when its attention fits PREFILL_ATTENTION_BYTES, else chunks of queries (at least
    MIN_QUERY_CHUNK) over as many rows as fit."""
    if not PREFILL_IN_PIECES or L <= 1:
        return n_rows, L
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    per_query = heads * (S + L) * 4 * 3          # scores, their softmax, the mask: bytes per row per query position
    budget = PREFILL_ATTENTION_BYTES.get(device.type, PREFILL_ATTENTION_BYTES["cpu"])
    if n_rows * L * per_query <= budget:
        return n_rows, L
    q = min(L, max(MIN_QUERY_CHUNK, budget // (n_rows * per_query)))
    rows = max(1, min(n_rows, budget // (q * per_query)))
    return rows, q


def _prefill_in_pieces(hf, ids, mask, pos, cache, S: int, rows_per: int, q_chunk: int, keep_all: bool):
    """Prefill ``ids`` ([rows, L], left-padded after the S shared positions already in ``cache``, broadcast) in
    groups of ``rows_per`` rows and chunks of ``q_chunk`` query positions, each chunk attending to its group's
    cache so far: the same attention as one pass. Returns one cache of all rows and the final hidden states
    ([rows, L, H] when ``keep_all``, else [rows, 1, H] of the last position)."""
    n, L = ids.shape
    groups, hiddens = [], []
    for r0 in range(0, n, rows_per):
        r1 = min(n, r0 + rows_per)
        gc = GrowingCache()
        for li, layer in enumerate(cache.layers if S else []):   # the shared prefix, copied for this group's rows
            gc.update(layer.keys[r0:r1], layer.values[r0:r1], li)
        outs = []
        for q0 in range(0, L, q_chunk):
            q1 = min(L, q0 + q_chunk)
            h = hf.model(input_ids=ids[r0:r1, q0:q1], attention_mask=mask[r0:r1, :S + q1],
                         position_ids=pos[r0:r1, q0:q1], past_key_values=gc, use_cache=True).last_hidden_state
            outs.append(h if keep_all else h[:, -1:])
        hiddens.append(torch.cat(outs, dim=1) if keep_all else outs[-1])
        groups.append(gc)
    if len(groups) == 1:
        return groups[0], hiddens[0]
    merged = GrowingCache()
    for li in range(len(groups[0].layers)):
        merged.update(torch.cat([g.layers[li].keys for g in groups]), torch.cat([g.layers[li].values for g in groups]),
                      li)
        for g in groups:   # free each group's buffers as soon as they are merged
            g.layers[li].key_buf = g.layers[li].value_buf = g.layers[li].keys = g.layers[li].values = None
    return merged, torch.cat(hiddens, dim=0)


@dataclass
class _Prefill:
    """A wave's prefill: one row per distinct prompt (``uniq``: prompt -> row), left-padded to L own tokens after S
    shared ones; the final hidden states (or logits, ``head`` None) and the last position's float32 logits."""
    uniq: dict[tuple[int, ...], int]
    L: int
    mask: torch.Tensor
    pos: torch.Tensor
    padded: bool
    cache: Any
    hf: Any                    # the model under a peft wrapper (its .model and .lm_head)
    f32_head: bool             # float32 logits out of the lm_head GEMM for a half-precision model (unembed.py)
    hidden: torch.Tensor
    head: Any
    last: torch.Tensor


def _generate_wave(module, tokenizer, specs, idxs, results, device) -> bool:
    """Decode one wave; True if it stopped early because a spec's ``should_yield()`` said so
    (its unfinished rows are then returned as "preempted", with their streams in ``resume``)."""
    pf = _prefill(module, specs, idxs, device)
    chunk = _logits_chunk(int(getattr(pf.hf.config, "vocab_size", pf.last.shape[-1]) or pf.last.shape[-1]),
                          pf.hidden.device)
    for i in idxs:
        results[i].cache_hit_tokens = 0
        if specs[i].prompt_logprobs or specs[i].topk_prompt_logprobs:
            _prompt_logprobs(specs[i], results[i], pf, pf.uniq[tuple(specs[i].prompt)], chunk)
    rows, src = _expand_rows(specs, idxs, pf.uniq)
    yielded = _decode(module, tokenizer, specs, idxs, rows, src, pf, device)
    for row in rows:
        res = results[row.spec_idx]
        if row.done is None and yielded:
            res.resume[len(res.sequences)] = row.gen
            res.sequences.append((row.tokens, row.logprobs, "preempted"))
        else:
            res.sequences.append((row.tokens, row.logprobs, row.done or "length"))
    return yielded


def _prefill(module, specs, idxs, device) -> _Prefill:
    """One row per distinct prompt. A prefix every prompt shares (an agent's system prompt and tool schemas) is
    prefilled once and its KV rows broadcast; the rest of each prompt is left-padded after it, padding masked out."""
    uniq: dict[tuple[int, ...], int] = {}
    for i in idxs:
        uniq.setdefault(tuple(specs[i].prompt), len(uniq))
    prompts = list(uniq)
    need_all_logits = any(specs[i].prompt_logprobs or specs[i].topk_prompt_logprobs for i in idxs)
    cache = GrowingCache()
    S = 0 if need_all_logits or len(prompts) < 2 else min(_common_prefix(prompts), min(len(p) for p in prompts) - 1)
    if S < MIN_SHARED_PREFIX:
        S = 0
    if S:
        module(input_ids=torch.tensor([prompts[0][:S]], device=device), past_key_values=cache, use_cache=True,
               logits_to_keep=1)
        broadcast_cache(cache, len(prompts))
    L = max(len(p) for p in prompts) - S
    ids = torch.zeros((len(prompts), L), dtype=torch.long)
    mask = torch.zeros((len(prompts), S + L), dtype=torch.long)
    mask[:, :S] = 1
    for r, p in enumerate(prompts):
        ids[r, L - (len(p) - S):] = torch.tensor(p[S:])
        mask[r, S + L - (len(p) - S):] = 1
    pos = ((mask.cumsum(-1) - 1).clamp(min=0))[:, S:]
    ids, mask, pos = ids.to(device), mask.to(device), pos.to(device)
    # Without left padding the attention mask is plain causal: let the model take its fast path.
    padded = any(len(p) != len(prompts[0]) for p in prompts)
    kw = dict(attention_mask=mask if padded else None, position_ids=pos if padded else None, past_key_values=cache,
              use_cache=True)
    hf = module.get_base_model() if hasattr(module, "get_base_model") else module
    # a half-precision model's logits in float32 out of the lm_head GEMM, as the trainer's (services/backend/unembed.py)
    f32_head = (unembed.ENABLED and hasattr(hf, "model") and hasattr(hf, "lm_head")
                and next(hf.parameters()).dtype in (torch.bfloat16, torch.float16))
    rows_per, q_chunk = _prefill_plan(len(prompts), L, S, hf.config, device)
    if (rows_per < len(prompts) or q_chunk < L) and hasattr(hf, "model") and hasattr(hf, "lm_head"):
        # the prefill's attention in pieces (rows x query positions) within PREFILL_ATTENTION_BYTES
        cache, hidden = _prefill_in_pieces(hf, ids, mask, pos, cache, S, rows_per, q_chunk, need_all_logits)
        head = hf.lm_head
        last = head_logits(head, hidden[:, -1, :])
    elif need_all_logits and CHUNKED_PROMPT_LOGPROBS and hasattr(hf, "model") and hasattr(hf, "lm_head"):
        # prompt logprobs (compute_logprobs, a KL reference): the final hidden states, and lm_head + log-softmax per
        # chunk of positions, never [rows, L, vocab] logits at once (an 11k-token prompt x 151,669 x 4 B = 6.7 GB
        # per copy; bench/bench_memory.py --routes prompt. Not the quick start's 7 GB prefill peak: docs/security.md)
        hidden = hf.model(input_ids=ids, **kw).last_hidden_state
        head = hf.lm_head
        last = head_logits(head, hidden[:, -1, :])
    elif f32_head and not need_all_logits:
        hidden = hf.model(input_ids=ids, **kw).last_hidden_state[:, -1:, :]
        head = hf.lm_head
        last = head_logits(head, hidden[:, -1, :])
    else:
        out = module(input_ids=ids, logits_to_keep=0 if need_all_logits else 1, **kw)
        hidden, head = out.logits, None    # the logits themselves (a model without .model / .lm_head)
        last = hidden[:, -1, :].float()
    return _Prefill(uniq, L, mask, pos, padded, cache, hf, f32_head, hidden, head, last)


def _prompt_logprobs(s: SampleSpec, result: SampleResult, pf: _Prefill, r: int, chunk: int) -> None:
    """The prompt's logprobs (and top-k) from prefill row ``r``: lm_head + log-softmax per chunk of positions."""
    hidden, head, L = pf.hidden, pf.head, pf.L
    P = len(s.prompt)
    first_scored = 1 if not s.prompt_logprobs_last_n else max(1, P - s.prompt_logprobs_last_n)
    k = s.topk_prompt_logprobs
    pl = np.full(P, np.nan, dtype=np.float32)
    tids = np.zeros((P, k), dtype=np.int32)
    tlps = np.full((P, k), -99999.0, dtype=np.float32)
    rows_h = hidden[r, L - P: L - 1]   # position j predicts prompt[j+1]
    tgt_all = torch.tensor(s.prompt[1:], device=hidden.device, dtype=torch.long)
    for c in range(0, P - 1, chunk):
        lg = rows_h[c: c + chunk]
        lg = head_logits(head, lg) if head is not None else lg.float()
        lsm = torch.log_softmax(lg, -1)
        if s.prompt_logprobs:
            pl[1 + c: 1 + c + len(lg)] = lsm.gather(-1, tgt_all[c: c + chunk, None])[:, 0].cpu().numpy()
        if k:
            v, t = torch.topk(lsm, k=min(k, lsm.shape[-1]), dim=-1)
            tids[1 + c: 1 + c + len(lg), : v.shape[1]] = t.cpu().numpy()
            tlps[1 + c: 1 + c + len(lg), : v.shape[1]] = v.cpu().numpy()
        del lg, lsm
    if s.prompt_logprobs:
        pl[:first_scored] = np.nan
        result.prompt_logprobs = pl
    if k:
        tids[:first_scored] = 0
        tlps[:first_scored] = -99999.0
        result.topk_prompt = (tids, tlps)


def _expand_rows(specs, idxs, uniq) -> tuple[list[_Row], list[int]]:
    """One row per sampled sequence (its seeded stream, or a resumed row's), and each row's prefill row."""
    rows: list[_Row] = []
    src: list[int] = []
    for i in idxs:
        s = specs[i]
        for k in range(s.num_samples):
            gen = None if s.seed is None else random.Random((int(s.seed) * 1_000_003 + s.row_offset + k) % (2**63))
            if s.prefix is not None:
                gen = s.resume_gen
            rows.append(_Row(i, gen, list(s.prefix[0]) if s.prefix else [], list(s.prefix[1]) if s.prefix else []))
            src.append(uniq[tuple(s.prompt)])
    return rows, src


def _decode(module, tokenizer, specs, idxs, rows: list[_Row], src: list[int], pf: _Prefill, device) -> bool:
    """Decode every row in lock-step until each stops (finished rows leave the batch); True if it yielded."""
    src_t = torch.tensor(src, device=device)
    cache = pf.cache
    cache.reorder_cache(src_t) if hasattr(cache, "reorder_cache") else None
    mask = pf.mask.index_select(0, src_t)
    next_pos = pf.pos[:, -1].index_select(0, src_t) + 1
    cur_logits = pf.last.index_select(0, src_t)
    max_new = max(specs[i].max_tokens - len(specs[i].prefix[0] if specs[i].prefix else ()) for i in idxs)
    active = list(range(len(rows)))  # indices into rows, aligned with batch rows
    should_yield = next((specs[i].should_yield for i in idxs if specs[i].should_yield is not None), None)

    temps = torch.tensor([specs[r.spec_idx].temperature for r in rows], dtype=torch.float32)
    topks = torch.tensor([specs[r.spec_idx].top_k for r in rows], dtype=torch.long)
    topps = torch.tensor([specs[r.spec_idx].top_p for r in rows], dtype=torch.float32)

    for step in range(max_new):
        a_idx = torch.tensor(active)
        toks, lps = _pick(cur_logits, temps[a_idx], topks[a_idx], topps[a_idx], [rows[j].gen for j in active])
        keep = _record_step(tokenizer, specs, rows, active, toks.tolist(), lps.tolist())
        if not keep:
            break
        if should_yield is not None and step + 1 >= MIN_STEPS_BEFORE_YIELD and should_yield():
            return True
        new_tokens = toks
        if len(keep) < len(active):
            kt = torch.tensor(keep, device=device)
            cache.reorder_cache(kt)
            mask = mask.index_select(0, kt)
            next_pos = next_pos.index_select(0, kt)
            new_tokens = toks.index_select(0, torch.tensor(keep))
            active = [active[b] for b in keep]
        if pf.padded:
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1)
        step_kw = dict(input_ids=new_tokens.view(-1, 1).to(device), attention_mask=mask if pf.padded else None,
                       position_ids=next_pos.view(-1, 1) if pf.padded else None, past_key_values=cache, use_cache=True)
        if pf.f32_head:   # the trainer's unembedding: float32 logits out of the lm_head GEMM (unembed.py)
            cur_logits = head_logits(pf.hf.lm_head, pf.hf.model(**step_kw).last_hidden_state[:, -1, :])
        else:
            cur_logits = module(**step_kw, logits_to_keep=1).logits[:, -1, :].float()
        next_pos = next_pos + 1
    return False


def _record_step(tokenizer, specs, rows: list[_Row], active: list[int], toks: list[int], lps: list[float]
                 ) -> list[int]:
    """Append each active row's token and logprob, mark the rows that stopped; the batch positions that go on."""
    keep = []
    for b, j in enumerate(active):
        row, spec = rows[j], specs[rows[j].spec_idx]
        t = toks[b]
        row.tokens.append(t)
        row.logprobs.append(lps[b])
        if t in spec.stop_token_ids:
            row.done = "stop"
        elif spec.stop_strings and _hit_stop_string(tokenizer, row.tokens, spec.stop_strings):
            row.done = "stop"
        elif len(row.tokens) >= spec.max_tokens:
            row.done = "length"
        if row.done is None:
            keep.append(b)
    return keep


def _pick(logits: torch.Tensor, temps, topks, topps, gens) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose one token per row; return (tokens, their log p under the untruncated model)."""
    logits = logits.cpu()
    logp = torch.log_softmax(logits, -1)
    greedy = (temps <= 0) | (topks == 1)
    scaled = logits if bool((temps == 1.0).all()) else logits / temps.clamp(min=1e-6)[:, None]
    if bool((topks > 1).any()):
        k = int(topks.max())
        kth = torch.topk(scaled, k=min(k, scaled.shape[-1]), dim=-1).values
        idx = (topks.clamp(min=1, max=scaled.shape[-1]) - 1)[:, None]
        thresh = kth.gather(-1, idx.clamp(max=kth.shape[-1] - 1))
        use = (topks > 1)[:, None]
        scaled = torch.where(use & (scaled < thresh), torch.full_like(scaled, float("-inf")), scaled)
    probs = logp.exp() if scaled is logits else torch.softmax(scaled, -1)
    if bool((topps < 1.0).any()):
        sp, si = torch.sort(probs, descending=True, dim=-1)
        cum = sp.cumsum(-1)
        drop = (cum - sp) >= topps[:, None]
        drop[:, 0] = False
        sp = sp.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, si, sp)
        probs = probs / probs.sum(-1, keepdim=True)
    # Inverse-CDF draw, batched over rows: one uniform per row (from the row's own seeded stream, or
    # torch's global generator for unseeded rows), then a search in the row's cumulative distribution.
    # A zero-probability token never has a cumulative mass step, so it is never drawn.
    u = torch.rand(len(logits), dtype=torch.float64)
    for b, g in enumerate(gens):
        if g is not None:
            u[b] = g.random()
    cum = probs.to(torch.float64).cumsum(-1)
    out = torch.searchsorted(cum, (u * cum[:, -1])[:, None], right=True)[:, 0].clamp(max=probs.shape[-1] - 1)
    if bool(greedy.any()):
        out = torch.where(greedy, torch.argmax(logits, dim=-1), out)
    return out, logp.gather(-1, out[:, None])[:, 0]


MIN_SHARED_PREFIX = 32  # shorter common prefixes are not worth a separate forward pass


def broadcast_cache(cache, rows: int) -> None:
    """Expand a one-row KV cache to ``rows`` rows (views: no copy until the cache grows)."""
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, *layer.keys.shape[1:])
        layer.values = layer.values.expand(rows, *layer.values.shape[1:])


def _common_prefix(prompts: list[tuple[int, ...]]) -> int:
    a, b = min(prompts), max(prompts)  # the lexicographic extremes bound every pairwise common prefix
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _hit_stop_string(tokenizer, tokens: list[int], stops: list[str]) -> bool:
    # Only the tail can contain a new match: decode enough tokens to cover the longest stop.
    tail = tokens[-(max(len(s) for s in stops) + 8):]
    text = tokenizer.decode(tail, skip_special_tokens=False)
    return any(s in text for s in stops)
