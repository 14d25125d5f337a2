"""Fixtures for the embedded-model tests: built once per session, all offline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from services.models.hf_cache import register
from services.models.tiny import make_tiny
from services.models.tokenizer import build_hf_tokenizer

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # works without `pip install -e .`
    sys.path.insert(0, str(ROOT))

MODEL_ID = "local/qwen3-tiny-xs"


@pytest.fixture(scope="session")
def small_tok():

    return build_hf_tokenizer("small")


@pytest.fixture(scope="session")
def full_tok():

    return build_hf_tokenizer("full")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """The default tiny model (xs, small vocab, seed 0) created once, plus its creation metadata."""

    out = tmp_path_factory.mktemp("models") / "qwen3-tiny-xs"
    meta = make_tiny(out, name=MODEL_ID, size="xs", vocab="small", seed=0)
    return out, meta


@pytest.fixture(scope="session")
def tiny_tok(tiny_dir):
    """The tokenizer as everyone else loads it: AutoTokenizer on the saved directory."""

    return AutoTokenizer.from_pretrained(str(tiny_dir[0]))


@pytest.fixture(scope="session")
def hf_home(tiny_dir, tmp_path_factory):

    home = tmp_path_factory.mktemp("hf-home")
    register(tiny_dir[0], MODEL_ID, hf_home=home)
    return home
