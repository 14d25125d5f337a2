"""Export a backend checkpoint to a Hugging Face model directory (transformers / vLLM / eval harnesses).

    python -m services.backend.export CHECKPOINT --out DIR [--adapter] [--config config/runtime.yaml]
    bash run.sh export CHECKPOINT --out DIR [--adapter]      # the same, in .venv-runtime

CHECKPOINT is a ``tinker://<model_id>/weights|sampler_weights/<name>`` path (resolved under the backend's
state directory from the runtime config), a run directory (``runs/<mode>-<timestamp>``: its final
checkpoint) or a checkpoint directory itself. The result is one of:

* merged (default): ``config.json`` + ``model.safetensors`` + tokenizer + chat template; LoRA is folded
  into the base weights (a LoRA on ``lm_head`` unties it from the input embedding, as the backend's
  sampler does). Loads with ``AutoModelForCausalLM.from_pretrained(DIR)`` (the standard layout
  ``vllm serve DIR`` reads).
* ``--adapter`` (LoRA checkpoints only): a PEFT adapter directory (``adapter_config.json`` +
  ``adapter_model.safetensors``) + tokenizer; ``base_model_name_or_path`` is the base model's
  directory on this machine. Loads with ``PeftModel.from_pretrained(base, DIR)``.

Both directories also hold ``local_tinker_export.json`` (source checkpoint, base model, steps). The
backend uses the same code for ``save_weights_external`` (what ``tinker checkpoint download`` fetches).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyrage
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoTokenizer

from services.common.config import ConfigError, load_typed
from services.common.service_configs import RuntimeFile
from services.models.loading import load_model

from . import checkpoints
from .errors import BadRequest
from .paths import repo_path

EXPORT_META = "local_tinker_export.json"


class ExportError(Exception):
    """A checkpoint that cannot be exported as asked (message says why and what to do)."""


def export_checkpoint(ck: Path, out: Path, base_path: str, adapter: bool = False, source: str | None = None,
                      dtype: str = "float32") -> dict[str, Any]:
    """Write the HF directory for checkpoint directory ``ck`` into ``out`` (created; must be empty or absent).
    ``dtype``: of the merged weights (the merge itself runs in float32)."""
    meta = checkpoints.read_meta(ck)
    tc = meta["train_config"]
    is_lora = tc["rank"] > 0
    if adapter and not is_lora:
        raise ExportError(f"{source or ck} is a full fine-tuning checkpoint (rank 0): there is no adapter to export; "
                          "drop --adapter to export the full weights")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"output directory {out} is not empty")
    tmp = out.with_name(f".{out.name}.tmp{time.time_ns()}")
    tmp.mkdir(parents=True)
    try:
        AutoTokenizer.from_pretrained(base_path).save_pretrained(str(tmp))
        if adapter:
            cfg = json.loads((ck / "adapter_config.json").read_text())
            cfg["base_model_name_or_path"] = str(base_path)
            (tmp / "adapter_config.json").write_text(json.dumps(cfg, indent=1))
            shutil.copyfile(ck / "adapter_model.safetensors", tmp / "adapter_model.safetensors")
        else:
            model = load_model(base_path, torch.float32)
            if is_lora:
                model = _merge_lora(model, ck)
            else:
                missing, unexpected = model.load_state_dict(load_file(str(ck / "model.safetensors")), strict=False)
                tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
                if unexpected or set(missing) - tied:
                    raise ExportError(f"{source or ck} does not match {base_path}: missing {sorted(missing)[:3]}, "
                                      f"unexpected {sorted(unexpected)[:3]}")
            model.to(getattr(torch, dtype)).save_pretrained(str(tmp))
            base_gen = Path(base_path) / "generation_config.json"
            if base_gen.exists():
                shutil.copyfile(base_gen, tmp / "generation_config.json")
        info = {"source": source or str(ck), "base_model": tc["base_model"], "base_model_path": str(base_path),
                "format": "peft_adapter" if adapter else "merged", "dtype": None if adapter else dtype,
                "lora_rank": tc["rank"] or None,
                "steps": meta.get("steps"), "exported": time.time()}
        (tmp / EXPORT_META).write_text(json.dumps(info, indent=1))
        if out.exists():
            out.rmdir()
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return info


def _merge_lora(model, ck: Path):
    """Fold the checkpoint's LoRA into ``model`` (untying lm_head first if the LoRA touches it)."""
    cfg = json.loads((ck / "adapter_config.json").read_text())
    targets = cfg.get("target_modules") or []
    if "lm_head" in targets and getattr(model.config, "tie_word_embeddings", False):
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    peft_model = PeftModel.from_pretrained(model, str(ck))
    return peft_model.merge_and_unload()


# ---------------------------------------------------------------------- command line
def resolve(spec: str, checkpoint_dir: Path) -> tuple[Path, str]:
    """CHECKPOINT argument -> (checkpoint directory, tinker path or description)."""
    if spec.startswith(checkpoints.SCHEME):
        try:
            ck = checkpoints.parse(spec).directory(checkpoint_dir)
        except BadRequest as e:
            raise ExportError(e.message) from None
        if not checkpoints.exists(ck):
            raise ExportError(f"checkpoint {spec} does not exist under {checkpoint_dir} (list them: the SDK's "
                              "RestClient.list_user_checkpoints(), or ls the directory)")
        return ck, spec
    d = Path(spec)
    if checkpoints.exists(d):
        return d, str(d)
    for name, key in (("checkpoint.json", "path"), ("state.json", "checkpoint")):
        if (d / name).exists():
            path = json.loads((d / name).read_text()).get(key)
            if path:
                return resolve(path, checkpoint_dir)
    raise ExportError(f"{spec!r} is neither a tinker:// path, a run directory with a saved checkpoint "
                      "(checkpoint.json or state.json) nor a checkpoint directory (meta.json)")


def encrypt_tree(root: Path, recipients: list) -> None:
    """Encrypt every file under ``root`` to ``recipients`` as FILE.age (the plaintext is removed)."""
    for f in [p for p in root.rglob("*") if p.is_file()]:
        pyrage.encrypt_file(str(f), f"{f}.age", recipients)
        f.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bash run.sh export", description=__doc__.split("\n\n")[0],
                                 epilog="Reads checkpoints from disk: the backend need not be running.")
    ap.add_argument("checkpoint", help="tinker://<model_id>/weights/<name>, a run directory, or a checkpoint directory")
    ap.add_argument("--out", required=True, help="output directory (created; must not exist or be empty)")
    ap.add_argument("--adapter", action="store_true",
                    help="write a PEFT adapter directory instead of merged weights (LoRA only)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="dtype of the merged weights (default float32; bfloat16 halves the size for vLLM)")
    ap.add_argument("--config", default=None,
                    help="runtime config (default: config/runtime.yaml, else templates/runtime.yaml)")
    ap.add_argument("--state-dir", default=None,
                    help="backend state directory (default: backend.state_dir of the config)")
    args = ap.parse_args(argv)

    try:
        cfg = load_typed("runtime", RuntimeFile, args.config)
    except ConfigError as e:
        print(f"export: error: {e}", file=sys.stderr)
        return 2
    state_dir = repo_path(args.state_dir or cfg.backend.state_dir)
    bases = {m.name: str(repo_path(m.path)) for m in cfg.runtime.models}
    try:
        ck, source = resolve(args.checkpoint, state_dir / "checkpoints")
        base = checkpoints.train_config(ck)["base_model"]
        if base not in bases:
            raise ExportError(f"base model {base!r} of {source} is not in the runtime config "
                              f"(configured: {', '.join(bases) or 'none'}); pass --config with the config it was "
                              "trained under")
        print(f"[export] {source} -> {args.out} ({'PEFT adapter' if args.adapter else 'merged weights'}, base {base})",
              file=sys.stderr)
        info = export_checkpoint(ck, Path(args.out), bases[base], args.adapter, source, args.dtype)
    except ExportError as e:
        print(f"export: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": str(Path(args.out).resolve()), **info}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
