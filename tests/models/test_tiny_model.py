"""The tiny model directory: loads like a real checkpoint, deterministic, resolvable by id offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tinker_cookbook import model_info
from tinker_cookbook.exceptions import ConfigurationError

from services.models import cookbook_compat
from services.models.hf_cache import check_model_id, content_revision, register, registered_path
from services.models.loading import load_model_and_tokenizer, model_facts, resolve_model_path
from services.models.tiny import make_tiny

MODEL_ID = "local/qwen3-tiny-xs"
ROOT = Path(__file__).resolve().parents[2]


def test_make_tiny_directory(tiny_dir):
    path, meta = tiny_dir
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja", "local_tinker.json"} <= names
    assert meta["created_s"] < 10
    assert meta["parameters"] == 1_450_752 and meta["model_vocab_size"] == 8256
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["tie_word_embeddings"] is True
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]) == (2, 128, 4, 2, 32, 384, 8256)
    gen = json.loads((path / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [8194, 8192] and gen["pad_token_id"] == 8192


def test_load_model_and_tokenizer_by_path(tiny_dir):

    model, tok = load_model_and_tokenizer(tiny_dir[0], "cpu", "auto")
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.dtype == torch.float32 and not model.training
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    facts = model_facts(model, tok, tiny_dir[0])
    assert (facts.vocab_size, facts.tokenizer_size, facts.eos_token_id, facts.stop_token_ids, facts.pad_token_id,
            facts.bos_token_id) == (8256, 8218, 8194, [8194, 8192], 8192, None)
    assert facts.meta["model_id"] == MODEL_ID
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                  return_dict=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape == (1, ids["input_ids"].shape[1], 8256) and torch.isfinite(logits).all()
    m16, _ = load_model_and_tokenizer(tiny_dir[0], "cpu", "bfloat16")
    assert m16.dtype == torch.bfloat16


def test_same_seed_same_files(tiny_dir, tmp_path):

    make_tiny(tmp_path / "again", name=MODEL_ID, seed=0)
    assert content_revision(tmp_path / "again") == content_revision(tiny_dir[0])
    make_tiny(tmp_path / "seed1", name=MODEL_ID, seed=1)
    assert content_revision(tmp_path / "seed1") != content_revision(tiny_dir[0])


def test_register_layout_and_loader_by_id(tiny_dir, hf_home):

    repo = Path(hf_home) / "hub" / "models--local--qwen3-tiny-xs"
    rev = (repo / "refs" / "main").read_text()
    snap = repo / "snapshots" / rev
    assert len(rev) == 40 and (snap / "tokenizer.json").is_file() and (snap / "model.safetensors").is_file()
    assert registered_path(MODEL_ID, hf_home) == snap
    assert register(tiny_dir[0], MODEL_ID, hf_home=hf_home) == snap  # idempotent
    assert resolve_model_path(MODEL_ID, hf_home) == snap
    model, tok = load_model_and_tokenizer(MODEL_ID, "cpu", "float32", hf_home=hf_home)
    assert tok.eos_token_id == 8194 and model.config.vocab_size == 8256
    with pytest.raises(FileNotFoundError):
        resolve_model_path("local/not-there", hf_home)
    for bad in ["qwen3-tiny", "a/b/c", "local/x--y", ""]:
        with pytest.raises(ValueError):
            check_model_id(bad)


RESOLVE_SCRIPT = textwrap.dedent("""
    import json, sys
    name = sys.argv[1]
    # exactly what tinker 0.38 TrainingClient/SamplingClient.get_tokenizer() runs (no server needed)
    from tinker.lib.public_interfaces.sampling_client import _load_tokenizer_from_model_info
    sdk = _load_tokenizer_from_model_info(name, None)
    sdk_variant = _load_tokenizer_from_model_info(name + "/some-variant", None)  # SDK drops a 3rd path part
    sdk_ckpt = _load_tokenizer_from_model_info(name + ":step-3", None)
    # what every cookbook recipe runs
    from tinker_cookbook.tokenizer_utils import get_tokenizer
    from tinker_cookbook import renderers, model_info
    cb = get_tokenizer(name)
    r = renderers.get_renderer("qwen3_instruct", cb)
    prompt = r.build_generation_prompt([{"role": "user", "content": "hi"}]).to_ints()
    model_info.warn_if_renderer_not_recommended(name, "qwen3_instruct")  # unknown org: must not raise
    print(json.dumps({
        "sdk": sdk.encode("<|im_start|>hello<|im_end|>"), "sdk_variant": sdk_variant.eos_token_id,
        "sdk_ckpt": sdk_ckpt.eos_token_id, "cookbook": cb.eos_token_id, "prompt": cb.decode(prompt),
        "stop": r.get_stop_sequences(), "class": type(cb).__name__,
    }))
""")


def test_sdk_and_cookbook_resolve_by_name_offline(hf_home, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE", "TRANSFORMERS_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(hf_home), PYTHONPATH=str(ROOT))
    script = tmp_path / "resolve.py"
    script.write_text(RESOLVE_SCRIPT)
    out = subprocess.run([sys.executable, str(script), MODEL_ID], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["sdk"] == [8193, 71, 4791, 8194]
    assert got["sdk_variant"] == got["sdk_ckpt"] == got["cookbook"] == 8194
    assert got["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert got["stop"] == [8194]


def test_cli_help():
    out = subprocess.run([sys.executable, "-m", "services.models", "make-tiny", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "--vocab" in out.stdout and "--size" in out.stdout


def test_cookbook_registry_learns_local_org(hf_home, monkeypatch):

    monkeypatch.setattr(model_info, "get_model_attributes", model_info.get_model_attributes)  # undone after
    monkeypatch.setenv("HF_HUB_CACHE", str(Path(hf_home) / "hub"))
    with pytest.raises(ConfigurationError):
        model_info.get_recommended_renderer_name(MODEL_ID)  # the cookbook alone: unknown org
    cookbook_compat.install()
    cookbook_compat.install()  # idempotent
    assert model_info.get_recommended_renderer_name(MODEL_ID) == "qwen3_instruct"
    assert model_info.get_recommended_renderer_name(MODEL_ID + ":ckpt") == "qwen3_instruct"
    assert model_info.get_model_attributes(MODEL_ID).size_str == "xs"
    assert model_info.get_recommended_renderer_name("Qwen/Qwen3-4B-Instruct-2507") == "qwen3_instruct"
