"""Training math of the in-process runtime: per-token logprobs (the fast path that skips work at
positions without gradient), microbatching, and Tinker's losses applied to one microbatch."""

from __future__ import annotations

import os

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from . import losses, sampler
from .codec import Datum
from .gpu.logprobs import bf16_lora, fused_token_logprobs
from .unembed import head_logits, linear_f32

# Full-vocabulary logits are never materialised for a whole micro-batch (issue 37: 8,192 tokens x 151,669
# x 4 B = 5 GB per copy, log-softmax and gradient copies beside it): lm_head + float32 log-softmax run per
# chunk of tokens, the chunk's logits recomputed in backward (activation checkpointing), so the extra
# memory is a few [chunk, V] float32 buffers, chunk = LOGITS_CHUNK_BYTES / (4 V) tokens. False: the
# previous path (model(ids).logits on CPU), for bench/bench_memory.py's baseline.
CHUNKED = True
LOGITS_CHUNK_BYTES = {"cuda": 2 << 30, "cpu": 64 << 20}   # cuda: 2048-token chunks as before (V ~ 152k)


def chunk_tokens_for(vocab: int, device: torch.device) -> int:
    """Tokens per lm_head chunk: one [chunk, vocab] float32 buffer within LOGITS_CHUNK_BYTES of the device."""
    return sampler.logits_chunk_tokens(LOGITS_CHUNK_BYTES, vocab, device, 32, 2048)


def token_logprobs(module: torch.nn.Module, inputs: list[np.ndarray], targets: list[np.ndarray],
                   device: torch.device, active: list[np.ndarray] | None = None) -> list[torch.Tensor]:
    """Per-token log p(target_i | input_<=i) for a batch of sequences (right-padded; causal
    attention makes the padding invisible to real tokens). Float32 log-softmax, per chunk of tokens."""
    lens = [len(x) for x in inputs]
    T = max(lens)
    ids = torch.zeros((len(inputs), T), dtype=torch.long)
    tgt = torch.zeros((len(inputs), T), dtype=torch.long)
    for i, (x, y) in enumerate(zip(inputs, targets)):
        ids[i, : len(x)] = torch.as_tensor(np.asarray(x, dtype=np.int64))
        tgt[i, : len(y)] = torch.as_tensor(np.asarray(y, dtype=np.int64))
    ids, tgt = ids.to(device), tgt.to(device)
    n_active = None if active is None else sum(int(np.count_nonzero(a)) for a in active)
    hf = module.get_base_model() if hasattr(module, "get_base_model") else module
    chunk = chunk_tokens_for(int(hf.config.vocab_size), device)
    with bf16_lora(module):  # on CUDA: peft's LoRA branches in bf16, not float32
        if active is not None and torch.is_grad_enabled() and n_active <= 0.5 * sum(lens):
            act = torch.zeros((len(inputs), T), dtype=torch.bool)
            for i, a in enumerate(active):
                act[i, : len(a)] = torch.as_tensor(np.asarray(a, dtype=bool))
            lp = _active_logprobs(module, ids, tgt, act.to(device), [np.asarray(x).tolist() for x in inputs], chunk)
        elif CHUNKED or device.type == "cuda":  # lm_head + log-softmax per token chunk: bounded whatever the vocab
            lp = fused_token_logprobs(module, ids, tgt, chunk)
        else:
            logits = module(input_ids=ids, use_cache=False).logits
            lp = gather_logprobs(logits, tgt)
    return [lp[i, :n] for i, n in enumerate(lens)]


def gather_logprobs(logits: torch.Tensor, tgt: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """log_softmax(logits)[tgt] in float32, chunked over the sequence to bound memory."""
    outs = []
    for s in range(0, logits.shape[1], chunk):
        lg = logits[:, s : s + chunk].float()
        outs.append(lg.gather(-1, tgt[:, s : s + chunk, None])[..., 0] - torch.logsumexp(lg, dim=-1))
    return torch.cat(outs, dim=1)


def _active_logprobs(module: torch.nn.Module, ids: torch.Tensor, tgt: torch.Tensor, act: torch.Tensor,
                     seqs: list[list[int]], chunk_tokens: int = 2048) -> torch.Tensor:
    """Logprobs of every position, with gradient only where ``act`` is set.

    Positions whose loss has zero gradient (prompt/observation tokens: weight 0 or advantage 0)
    need their logprob as an output but not its backward. The unembedding + log-softmax over
    the vocabulary dominates small models (and the memory of large-vocabulary ones), so it runs
    without autograd, once per distinct position: a prefix that rows share (same tokens and targets:
    the prompt of a GRPO group, the agent's system prompt and tool schemas) once for those rows,
    padding never; and with autograd only for the active positions. Values are the same computation
    either way."""
    hf = module.get_base_model() if hasattr(module, "get_base_model") else module
    lens = [len(x) for x in seqs]
    hidden, pref, rep = _hidden_states(hf, ids, seqs)
    B, T, H = hidden.shape
    h, t, a = hidden.reshape(B * T, H), tgt.reshape(B * T), act.reshape(B * T)
    head = hf.lm_head
    for r in range(B):   # a row's hidden states agree with its cluster's representative on [0, pref); targets may part
        if pref[r]:
            same_t = (tgt[r, :pref[r]] == tgt[rep[r], :pref[r]])
            pref[r] = int(same_t.long().cumprod(0).sum())

    def chunk(hs: torch.Tensor, ts: torch.Tensor) -> torch.Tensor:
        lg = head_logits(head, hs)
        return lg.gather(-1, ts[:, None])[:, 0] - torch.logsumexp(lg, dim=-1)

    with torch.no_grad():
        w, bias = _merged_linear(head)  # LoRA folded into one matrix: one matmul, no [N, V] adds

        def nograd(idx: torch.Tensor) -> torch.Tensor:
            out = []
            for s in range(0, len(idx), chunk_tokens):
                i = idx[s: s + chunk_tokens]
                lg = linear_f32(h.index_select(0, i), w, bias)
                out.append(lg.gather(-1, t.index_select(0, i)[:, None])[:, 0] - torch.logsumexp(lg, dim=-1))
            return torch.cat(out) if out else h.new_zeros(0, dtype=torch.float32)

        dev = ids.device
        pos = torch.arange(T, device=dev)
        p_t = torch.as_tensor(pref, device=dev)
        own = (pos[None, :] >= p_t[:, None]) & (pos[None, :] < torch.as_tensor(lens, device=dev)[:, None])
        lp = torch.zeros(B * T, dtype=torch.float32, device=dev)
        own_idx = own.reshape(-1).nonzero()[:, 0]
        lp = lp.index_put((own_idx,), nograd(own_idx))
        copied = (pos[None, :] < p_t[:, None]).reshape(-1).nonzero()[:, 0]   # the representative's values
        src = torch.as_tensor(rep, device=dev)[copied // T] * T + copied % T
        lp = lp.index_put((copied,), lp.index_select(0, src))
    idx = a.nonzero()[:, 0]
    if idx.numel():
        ha, ta = h.index_select(0, idx), t.index_select(0, idx)
        if ha.is_cuda or CHUNKED:  # keep only the chunk's hidden states; its [chunk, V] logits are recomputed
            grad_chunk = lambda hs, ts: checkpoint(chunk, hs, ts, use_reentrant=False)  # noqa: E731
        else:
            grad_chunk = chunk
        lpa = torch.cat([grad_chunk(ha[s: s + chunk_tokens], ta[s: s + chunk_tokens])
                         for s in range(0, len(idx), chunk_tokens)])
        lp = lp.index_put((idx,), lpa)
    return lp.view(B, T)


def prefix_clusters(rows: list[list[int]], min_shared: int) -> list[tuple[list[int], int]]:
    """Rows grouped by a shared prefix: (rows, prefix length) per cluster, the first row its representative.

    The rows in lexicographic order; two neighbours share a cluster when their common prefix is at least
    ``min_shared`` long and as long as the deeper sharing either of them has with its other neighbour (so the
    rollouts of one GRPO group form a cluster on their prompt, and groups whose prompts share only the system
    prompt stay apart). A cluster's prefix is what all its members share, leaving each one own position; rows in no
    cluster are one group with prefix 0 (a plain batched pass)."""
    lens = [len(x) for x in rows]
    order = sorted(range(len(rows)), key=lambda r: rows[r])

    def lcp(x: list[int], y: list[int]) -> int:
        n = min(len(x), len(y))
        diff = np.flatnonzero(np.asarray(x[:n]) != np.asarray(y[:n]))
        return int(diff[0]) if len(diff) else n

    adj = [lcp(rows[order[i]], rows[order[i + 1]]) for i in range(len(order) - 1)]
    deep = [max(adj[i - 1] if i else 0, adj[i] if i < len(adj) else 0) for i in range(len(order))]
    clusters: list[tuple[list[int], int]] = []
    alone: list[int] = []
    cur, p = [order[0]], 1 << 60
    for i in range(1, len(order) + 1):
        if i < len(order) and adj[i - 1] >= min_shared and adj[i - 1] >= min(deep[i - 1], deep[i]):
            cur.append(order[i])
            p = min(p, adj[i - 1])
            continue
        p = min(p, min(lens[r] for r in cur) - 1) if len(cur) > 1 else 0
        if len(cur) > 1 and p >= min_shared:
            clusters.append((cur, p))
        else:
            alone += cur
        if i < len(order):
            cur, p = [order[i]], 1 << 60
    if alone:
        clusters.append((sorted(alone), 0))
    return clusters


def _hidden_states(hf: torch.nn.Module, ids: torch.Tensor, seqs: list[list[int]]
                   ) -> tuple[torch.Tensor, list[int], list[int]]:
    """Final hidden states [B, T, H], and per row the length of the prefix it shares with its cluster's
    representative row and that row (prefix_clusters: the rollouts of a GRPO group share their prompt). A cluster's
    prefix runs once and its key/value cache is broadcast to the cluster's rows; autograd sums the rows' gradients
    through the broadcast, so values and gradients equal the plain batched pass. ``seqs``: each row's tokens
    (``ids`` without its right padding), on the host."""
    B, T = ids.shape
    if B == 1 or (hf.training and getattr(hf, "is_gradient_checkpointing", False)):
        return hf.model(input_ids=ids, use_cache=False).last_hidden_state, [0] * B, list(range(B))
    lens = [len(x) for x in seqs]
    clusters = prefix_clusters(seqs, sampler.MIN_SHARED_PREFIX)   # the host's token lists: no device round trip
    if len(clusters) == 1 and clusters[0][1] == 0:
        return hf.model(input_ids=ids, use_cache=False).last_hidden_state, [0] * B, list(range(B))
    pref, rep = [0] * B, list(range(B))
    parts, order = [], []
    for rows, P in clusters:
        width = max(lens[r] for r in rows)
        sub = ids[rows, :width]
        if P == 0:
            hs = hf.model(input_ids=sub, use_cache=False).last_hidden_state
        else:
            cache = DynamicCache()
            pre = hf.model(input_ids=sub[:1, :P], past_key_values=cache, use_cache=True).last_hidden_state
            sampler.broadcast_cache(cache, len(rows))
            rest = hf.model(input_ids=sub[:, P:], past_key_values=cache, use_cache=True).last_hidden_state
            hs = torch.cat([pre.expand(len(rows), -1, -1), rest], dim=1)
            for r in rows[1:]:   # the representative computes its own values
                pref[r], rep[r] = P, rows[0]
        parts.append(torch.nn.functional.pad(hs, (0, 0, 0, T - width)))
        order += rows
    hidden = torch.cat(parts, dim=0)
    inverse = torch.empty(B, dtype=torch.long)
    inverse[torch.as_tensor(order)] = torch.arange(B)
    return hidden.index_select(0, inverse.to(hidden.device)), pref, rep


def _merged_linear(layer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a Linear, with the active peft LoRA adapters added in (no grad)."""
    base = getattr(layer, "base_layer", None)
    if base is None:
        return layer.weight, layer.bias
    w = base.weight
    if not getattr(layer, "disable_adapters", False) and not getattr(layer, "merged", False):
        for name in getattr(layer, "active_adapters", []):
            if name in getattr(layer, "lora_A", {}):
                w = w + layer.get_delta_weight(name).to(w.dtype)
    return w, base.bias



def active_positions(loss_fn: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Where the loss can have a non-zero gradient: weight != 0, and for the advantage-weighted
    losses (everything but cross_entropy and dro's quadratic term) advantage != 0 as well. gspo's sequence
    ratio reads the logprobs at every position its sequence_ratio_mask marks, but without gradient (sg(lp)):
    token_logprobs computes every position's value either way, and autograd is needed only here."""
    n = len(inputs["target_tokens"])
    act = np.ones(n, dtype=bool) if "weights" not in inputs else np.asarray(inputs["weights"]) != 0
    if loss_fn in ("importance_sampling", "ppo", "cispo", "gspo"):
        act &= np.asarray(inputs["advantages"]) != 0
    return act


MIN_MICROBATCH_TOKENS = 256
# The share of the device's TOTAL memory that one micro-batch's activations may take. The cap is a pure function of
# the model's shape, the configured max_tokens_per_microbatch and the machine (issue 41): it was sized from the memory
# available at each call (issue 37), so the split of a forward_backward into micro-batches, and with it the
# summation order of the gradients, changed with whatever else the host was doing, and two same-seed runs (or a run
# and its --resume) drifted apart from their first update. Half of the host's memory (sandboxes, the sampler and
# other processes share it); 0.6 of a CUDA device's (the weights, gradients and optimizer state take the rest: on an
# H200 a 4B-shaped model keeps its 8192-token micro-batches, docs/performance.md).
MEMORY_SHARE = {"cpu": 0.5, "cuda": 0.6}


def memory_share(device: torch.device) -> float:
    return MEMORY_SHARE.get(device.type, MEMORY_SHARE["cpu"])


def capacity_bytes(device: torch.device) -> int:
    """The device's total memory (the host's RAM, or the CUDA device's): the same on every call and every run of one
    machine, unlike the memory free at the moment. ``LTS_MEMORY_BYTES`` overrides it (a container whose limit is
    below what the host reports)."""
    if os.environ.get("LTS_MEMORY_BYTES"):
        return int(float(os.environ["LTS_MEMORY_BYTES"]))
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    import psutil  # noqa: PLC0415 - the runtime's requirement; only read here
    return int(psutil.virtual_memory().total)


def available_bytes(device: torch.device) -> int:
    """Memory free for new tensors now: the host's MemAvailable, or the CUDA device's free memory plus what
    PyTorch's caching allocator holds without using it (reserved - allocated). Logged beside the cap when it is
    short; never used to size micro-batches (that would make the update depend on the machine's state)."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + max(0, int(cached))
    import psutil  # noqa: PLC0415 - the runtime's requirement; only read here
    return int(psutil.virtual_memory().available)


def activation_bytes_per_token(config, element_size: int, gradient_checkpointing: bool) -> int:
    """Estimated bytes a training token keeps for backward: per layer its residual input, and without activation
    checkpointing also the norms, q/k/v, attention output and the MLP's gate/up/activation/down inputs (~10 H +
    4 I elements), twice for backward's transient copies. The logits are bounded apart (LOGITS_CHUNK_BYTES)."""
    H = int(getattr(config, "hidden_size", 0) or 0)
    inter = int(getattr(config, "intermediate_size", 0) or 4 * H)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    per_layer = H if gradient_checkpointing else 10 * H + 4 * inter
    return max(1, 2 * layers * per_layer * element_size)


def microbatch_token_cap(config, element_size: int, device: torch.device, configured: int,
                         gradient_checkpointing: bool = False, capacity: int | None = None) -> int:
    """Tokens per micro-batch: ``configured`` (engine max_tokens_per_microbatch), lowered where the estimated
    activations would not fit memory_share(device) of the device's total memory (not below MIN_MICROBATCH_TOKENS for
    that, nor ever above ``configured``). A pure function of the model, the configuration and the machine, so the
    same request is split the same way on every call (reproducible updates)."""
    total = capacity_bytes(device) if capacity is None else capacity
    fit = int(total * memory_share(device)) // activation_bytes_per_token(config, element_size, gradient_checkpointing)
    return min(configured, max(MIN_MICROBATCH_TOKENS, fit))


def shared_prefix_order(seqs: list[list[int]]) -> list[int]:
    """Datum order for micro-batching: longest first, except that the rows of a prefix cluster (prefix_clusters: a
    GRPO group's rollouts) stay together, so a micro-batch computes their shared prompt once."""
    lens = [len(x) for x in seqs]
    units: list[list[int]] = []
    for rows, p in prefix_clusters(seqs, sampler.MIN_SHARED_PREFIX):
        units += [sorted(rows, key=lambda r: -lens[r])] if p else [[r] for r in rows]
    units.sort(key=lambda u: -max(lens[r] for r in u))
    return [r for u in units for r in u]


def microbatches(order: list[int], lens: list[int], max_tokens: int) -> list[list[int]]:
    """Group datums (longest first) so that batch_size * max_len <= max_tokens."""
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = max([lens[j] for j in cur] + [lens[i]])
        if cur and width * (len(cur) + 1) > max_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out



def microbatch_loss(module: torch.nn.Module, batch: list[Datum], loss_fn: str, fn: losses.LossFn,
                    cfg: dict[str, float], dev: torch.device, forward_only: bool
                    ) -> tuple[torch.Tensor, list[dict[str, np.ndarray]], tuple[float, int]]:
    """Summed loss of one microbatch (with gradient unless ``forward_only``), each datum's
    ``logprobs`` / ``elementwise_loss``, and (ppo, cispo, gspo) the clipped tokens among the positions the
    loss acts on (weight and advantage non-zero; a prompt's positions are not counted) and how many
    those positions are."""
    active = [active_positions(loss_fn, d.inputs) for d in batch]
    lps = token_logprobs(module, [d.tokens for d in batch], [d.inputs["target_tokens"] for d in batch], dev,
                         None if forward_only else active)
    loss = torch.zeros((), device=dev, dtype=torch.float32)
    results = []
    clipped, counted = 0.0, 0
    for d, lp, act in zip(batch, lps, active):
        x = {k: torch.as_tensor(np.asarray(v, dtype=np.float32), device=dev)
             for k, v in d.inputs.items() if k != "target_tokens"}
        w = x.get("weights")
        el = fn(lp, x, cfg)
        if w is not None:
            el = el * w
        loss = loss + el.sum()
        results.append({"logprobs": lp.detach().float().cpu().numpy(),
                        "elementwise_loss": el.detach().float().cpu().numpy()})
        if loss_fn in losses.CLIPPED:   # gspo: the sequence ratio, the one value its tokens clip
            r = losses.clip_ratio(loss_fn, lp.detach(), x)[torch.as_tensor(act, device=dev)]
            clipped += float(((r < cfg["clip_low_threshold"]) | (r > cfg["clip_high_threshold"])).float().sum())
            counted += int(act.sum())
    return loss, results, (clipped, counted)
