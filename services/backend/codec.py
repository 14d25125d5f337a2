"""Protobuf <-> Python for the two binary endpoints (tinker==0.38.0's tinker_public.proto).

forward_backward requests arrive as ``ForwardBackwardRequest``; forward_backward and sample
results leave as ``ForwardBackwardOutput`` / ``SampleResponse``. Everything else is JSON."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tinker.proto import tinker_public_pb2 as pb

from .errors import BadRequest

_NP = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}


@dataclass
class Datum:
    tokens: np.ndarray                      # int64 [N] model input
    inputs: dict[str, np.ndarray] = field(default_factory=dict)  # loss_fn_inputs, each [N]


@dataclass
class FwdBwdRequest:
    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float]
    forward_only: bool
    data: list[Datum]


def _tensor(name: str, t: pb.Tensor) -> np.ndarray:
    dt = _NP.get(t.dtype)
    if dt is None:
        raise BadRequest(f"loss_fn_inputs[{name!r}]: unsupported dtype {t.dtype}")
    shape = list(t.shape)
    if t.HasField("sparse_csr"):
        if len(shape) != 2:
            raise BadRequest(f"loss_fn_inputs[{name!r}]: sparse tensors must be 2-D")
        vals = np.frombuffer(t.sparse_csr.values, dtype=dt)
        crow = np.frombuffer(t.sparse_csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(t.sparse_csr.col_indices, dtype=np.int64)
        dense = np.zeros(shape, dtype=dt)
        for r in range(shape[0]):
            s, e = int(crow[r]), int(crow[r + 1])
            dense[r, col[s:e]] = vals[s:e]
        arr = dense
    else:
        arr = np.frombuffer(t.dense, dtype=dt)
        if shape:
            if int(np.prod(shape)) != arr.size:
                raise BadRequest(f"loss_fn_inputs[{name!r}]: shape {shape} does not match {arr.size} values")
            arr = arr.reshape(shape)
    if arr.ndim != 1:
        raise BadRequest(f"loss_fn_inputs[{name!r}]: only 1-D per-token tensors are supported, got shape "
                         f"{list(arr.shape)}")
    return arr


def decode_forward_backward(body: bytes) -> FwdBwdRequest:
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as e:  # noqa: BLE001
        raise BadRequest(f"forward_backward body is not a valid tinker_public.ForwardBackwardRequest: {e}") from e
    config: dict[str, float] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for k, v in msg.loss_fn_config_v2.items():
        if v.WhichOneof("value") == "text":
            raise BadRequest(f"loss_fn_config[{k!r}]: text values are not supported")
        config[k] = float(v.number)
    data = []
    for i, d in enumerate(msg.data):
        toks = []
        for c in d.model_input:
            kind = c.WhichOneof("chunk")
            if kind != "encoded_text":
                raise BadRequest(f"datum {i}: only encoded_text chunks are supported, got {kind}")
            toks.append(np.frombuffer(c.encoded_text.tokens, dtype=np.int32))
        tokens = np.concatenate(toks).astype(np.int64) if toks else np.zeros(0, np.int64)
        inputs = {name: _tensor(name, t) for name, t in d.loss_fn_inputs.items()}
        data.append(Datum(tokens, inputs))
    return FwdBwdRequest(msg.model_id, int(msg.seq_id), msg.loss_fn, config, bool(msg.forward_only), data)


def encode_forward_backward_output(per_datum: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """One ArrayRecord holding every datum's per-token float32 fields."""
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    rec = out.loss_fn_outputs.add()
    rec.num_datums = len(per_datum)
    names = list(per_datum[0]) if per_datum else []
    for name in names:
        arrays = [np.ascontiguousarray(d[name], dtype=np.float32) for d in per_datum]
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([a.nbytes for a in arrays])
        bt = rec.fields[name]
        bt.data = b"".join(a.tobytes() for a in arrays)
        bt.offsets = offsets.tobytes()
        bt.dtype = pb.DTYPE_FLOAT32
    for k, v in metrics.items():
        out.metrics[k] = float(v)
    return out.SerializeToString()


@dataclass
class SampledSeq:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" | "length"


def encode_sample_response(seqs: list[SampledSeq], prompt_logprobs: np.ndarray | None = None,
                           topk: tuple[np.ndarray, np.ndarray] | None = None, cache_hit_tokens: int = 0) -> bytes:
    out = pb.SampleResponse(prompt_cache_hit_tokens=cache_hit_tokens)
    for s in seqs:
        q = out.sequences.add()
        q.stop_reason = pb.STOP_REASON_STOP if s.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        q.tokens = np.asarray(s.tokens, dtype=np.int32).tobytes()
        q.logprobs = np.asarray(s.logprobs, dtype=np.float32).tobytes()
    if prompt_logprobs is not None:
        out.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    if topk is not None:
        ids, lps = topk
        out.topk_prompt_logprobs.token_ids = np.ascontiguousarray(ids, dtype=np.int32).tobytes()
        out.topk_prompt_logprobs.logprobs = np.ascontiguousarray(lps, dtype=np.float32).tobytes()
        out.topk_prompt_logprobs.k = int(ids.shape[1])
        out.topk_prompt_logprobs.length = int(ids.shape[0])
    return out.SerializeToString()
