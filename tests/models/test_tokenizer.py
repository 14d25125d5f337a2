"""The Qwen BPE tokenizer built from qwen.tiktoken: exact ids, tiktoken parity, round trips."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
import tiktoken

from services.models.tokenizer import ADDED_TOKENS, QWEN_PATTERN, VOCAB_SPECS, kept_ranks

ROOT = Path(__file__).resolve().parents[2]

UNICODE_SAMPLES = [
    "日本語のテキストと漢字、中文句子：你好，世界！",
    "Ωμέγα ελληνικά, русский текст, עברית, العربية, हिन्दी, 한국어 문장",
    "emoji 🤖🎉👩‍💻🇫🇷 café naïve façade coöperate ½ ⅞ ① ② x² ∑∫√∞ ≠ ≤",
    "numbers 0123456789 3.14159 -42 1e-9 0xFF 1_000_000 ٣٤٥ ４５６",
    "whitespace:\t\ttabs  two  spaces   three\r\nCRLF\n\n\nblank lines \u00a0nbsp \u3000ideographic",
    "contractions: I'm, you're, we've, they'll, he'd, it's, DON'T, I'LL",
    "def f(x):\n    return x ** 2  # comment\n\nclass A(B):\n\tpass\n",
    '{"json": [1, 2, {"k": "v\\n"}], "null": null}\n<div class="x">&amp;</div>',
    "diff --git a/x.py b/x.py\n@@ -1,3 +1,3 @@\n-    old()\n+    new()\n",
]


def mixed_text() -> str:
    """Deterministic mixed text: this project's own source code plus multilingual samples (NFC)."""
    src = sorted((ROOT / "services" / "models").glob("*.py"))
    parts = [p.read_text() for p in src] + UNICODE_SAMPLES
    return unicodedata.normalize("NFC", "\n".join(parts))


def tiktoken_encoding(vocab: str):
    spec = VOCAB_SPECS[vocab]
    return tiktoken.Encoding(
        f"qwen-{vocab}", pat_str=QWEN_PATTERN, mergeable_ranks=kept_ranks(vocab),
        special_tokens={c: spec.token_id(c) for c, _ in ADDED_TOKENS},
    )


def test_full_vocab_reference_ids(full_tok):
    # Public reference encoding of Qwen2/2.5/3 tokenizers.
    assert full_tok.encode("<|im_start|>hello<|im_end|>") == [151644, 14990, 151645]
    assert len(full_tok) == 151_669
    assert full_tok.convert_tokens_to_ids(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                                           "<think>", "</think>", "<|endoftext|>"]) == [
        151657, 151658, 151665, 151666, 151667, 151668, 151643]
    assert full_tok.eos_token_id == 151645 and full_tok.pad_token_id == 151643
    assert full_tok.bos_token_id is None


def test_small_vocab_ids(small_tok):
    assert len(small_tok) == 8_218 and VOCAB_SPECS["small"].model_vocab == 8_256
    ids = [small_tok.convert_tokens_to_ids(c) for c, _ in ADDED_TOKENS]
    assert ids == list(range(8192, 8218))
    assert small_tok.eos_token == "<|im_end|>" and small_tok.eos_token_id == 8194
    assert small_tok.pad_token == "<|endoftext|>" and small_tok.pad_token_id == 8192
    assert small_tok.bos_token_id is None
    assert small_tok.encode("<|im_start|>hello<|im_end|>") == [8193, 71, 4791, 8194]  # "h" "ello": hello is rank 14990


@pytest.mark.parametrize("vocab", ["small", "full"])
def test_matches_tiktoken_on_mixed_text(vocab, small_tok, full_tok):
    tok = {"small": small_tok, "full": full_tok}[vocab]
    enc = tiktoken_encoding(vocab)
    text = mixed_text()
    ours = tok.encode(text, add_special_tokens=False)
    ref = enc.encode(text, allowed_special="all")
    assert len(ref) > 5000
    assert ours == ref
    # Added tokens inside text are recognised as one token each, as in tiktoken with allowed_special.
    chat = "<|im_start|>user\n<tool_call>\n{\"a\": 1}\n</tool_call><|im_end|>\n<think>x</think>"
    assert tok.encode(chat) == enc.encode(chat, allowed_special="all")


@pytest.mark.parametrize("vocab", ["small", "full"])
def test_round_trip(vocab, small_tok, full_tok):
    tok = {"small": small_tok, "full": full_tok}[vocab]
    limit = VOCAB_SPECS[vocab].num_ranks
    plain = mixed_text()
    for content, _ in ADDED_TOKENS:  # our sources mention them; the round trip below keeps them
        plain = plain.replace(content, "")
    for text in [plain, *UNICODE_SAMPLES, "", " ", "\n", "a" * 1000, "🤖" * 7]:
        ids = tok.encode(text, add_special_tokens=False)
        assert all(i < limit for i in ids)  # ordinary text only uses BPE ranks (small: only kept merges)
        assert tok.decode(ids) == text
    text = mixed_text()
    assert tok.decode(tok.encode(text)) == text


def test_special_and_plain_added_tokens(small_tok):
    ids = small_tok.encode("<|im_start|>a<tool_call>b</tool_call><think>c</think><|im_end|>")
    assert small_tok.decode(ids, skip_special_tokens=True) == "a<tool_call>b</tool_call><think>c</think>"
    special = {c for c, sp in ADDED_TOKENS if sp}
    assert set(small_tok.all_special_tokens) >= {"<|im_end|>", "<|endoftext|>"}
    assert "<tool_call>" not in small_tok.all_special_tokens and "<think>" not in small_tok.all_special_tokens
    assert len(special) == 14


def test_nfc_normalisation(small_tok):
    # Like Qwen's HF tokenizer (and unlike raw tiktoken) input is NFC-normalised first.
    decomposed = "cafe\u0301"
    assert small_tok.encode(decomposed) == small_tok.encode("café")
