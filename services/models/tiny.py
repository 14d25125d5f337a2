"""The embedded default: a tiny, randomly initialised Qwen3 model saved as a normal HF directory.

The directory holds ``config.json``, ``model.safetensors``, ``generation_config.json``,
``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja`` and ``local_tinker.json``
(what we made and how), and loads with ``AutoModelForCausalLM`` / ``AutoTokenizer`` exactly like
a real Qwen3 checkpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from .tokenizer import VOCAB_SPECS, save_tokenizer

SIZES: dict[str, dict] = {
    # 1.45M params with the small vocabulary
    "xs": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
               head_dim=32, intermediate_size=384),
    # ~1.6x slower per token than xs
    "s": dict(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
              head_dim=64, intermediate_size=768),
}

DEFAULT_SIZE = "xs"
DEFAULT_VOCAB = "small"


def default_model_id(size: str = DEFAULT_SIZE, vocab: str = DEFAULT_VOCAB) -> str:
    """The id the backend serves the tiny model under (and the HF-cache name it is registered as).

    ``local/`` is not an organisation on the Hub, so the name can never be mistaken for (or
    resolve to) a published model.
    """
    return f"local/qwen3-tiny-{size}" + ("" if vocab == "small" else f"-{vocab}vocab")


def make_config(size: str = DEFAULT_SIZE, vocab: str = DEFAULT_VOCAB):
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    spec = VOCAB_SPECS[vocab]
    return Qwen3Config(
        vocab_size=spec.model_vocab,
        max_position_embeddings=32_768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        hidden_act="silu",
        initializer_range=0.02,
        use_cache=True,
        bos_token_id=spec.pad_id,          # as in Qwen3's config: <|endoftext|> (never prepended)
        eos_token_id=spec.eos_id,          # <|im_end|>
        pad_token_id=spec.pad_id,
        torch_dtype="float32",
        **SIZES[size],
    )


def make_tiny(out: str | Path, name: str | None = None, size: str = DEFAULT_SIZE,
              vocab: str = DEFAULT_VOCAB, seed: int = 0) -> dict:
    """Create the tiny model in ``out`` (created; existing files are overwritten). Returns its metadata."""

    t0 = time.time()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    name = name or default_model_id(size, vocab)
    tok_info = save_tokenizer(out, vocab)

    config = make_config(size, vocab)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=[tok_info["eos_token_id"], tok_info["pad_token_id"]],  # <|im_end|>, <|endoftext|>
        pad_token_id=tok_info["pad_token_id"],
    )
    model.save_pretrained(str(out), safe_serialization=True)

    n_params = sum(p.numel() for p in model.parameters())
    meta = {
        "model_id": name,
        "kind": "local-tinker tiny model (random init)",
        "architecture": "Qwen3ForCausalLM",
        "size": size,
        "seed": seed,
        "parameters": n_params,
        "chat_template": "qwen3-instruct-2507 (non-thinking)",
        "recommended_renderer": "qwen3_instruct",
        **tok_info,
        "config": {k: getattr(config, k) for k in SIZES[size]},
    }
    # No timestamps in the directory: the same arguments give byte-identical files.
    (out / "local_tinker.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {**meta, "path": str(out), "created_s": round(time.time() - t0, 3)}
