"""What the OpenAI-compatible endpoint costs over the SDK's ``sample`` (issue 34), on the embedded
tiny model, CPU, one backend, the same run:

* first-token latency: a 1-token request (``/oai`` chat completion, streamed: time to the first SSE
  chunk; ``/oai`` completion with token ids; ``SamplingClient.sample`` with the same prompt tokens);
* tokens/s of 64-token answers (same prompt, seed and params on both sides: the same tokens are drawn).

Interleaved rounds, medians. The endpoint's own work (chat template, tokenizer, decode, JSON) is the
difference; target: ≤ 5 ms per request.

    .venv-control/bin/python bench/bench_oai.py [--rounds 20] [--tokens 64] [--url http://127.0.0.1:PORT --key K]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import openai  # noqa: E402
import tinker  # noqa: E402
from tinker import types  # noqa: E402

from helpers import BackendProc, ensure_tiny_model  # noqa: E402
from services.backend import compat  # noqa: E402
from services.common import renderers  # noqa: E402
from services.common.renderers.qwen3 import parse_reply  # noqa: E402

MSGS = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write a short function that adds two numbers, and explain it."}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--url", help="a running backend serving the tiny model (default: start one)")
    ap.add_argument("--key", default="tml-test-key")
    a = ap.parse_args()
    if a.url:
        b = BackendProc(Path("."), port=int(a.url.rsplit(":", 1)[1]), key=a.key, model=ensure_tiny_model()[0])
        return run(b, a.rounds, a.tokens)
    name, path = ensure_tiny_model()
    with tempfile.TemporaryDirectory(prefix="bench-oai-") as tmp:
        b = BackendProc(Path(tmp), model=name, model_path=path).start(timeout=600)
        try:
            run(b, a.rounds, a.tokens)
        finally:
            b.stop()


def run(b: BackendProc, rounds: int, n_tok: int) -> None:
    oai = openai.OpenAI(base_url=b.url + "/oai/api/v1", api_key=b.key, max_retries=0)
    sc = tinker.ServiceClient(base_url=b.url, api_key=b.key).create_sampling_client(base_model=b.model)
    first = oai.chat.completions.create(model=b.model, messages=MSGS, max_tokens=1, seed=0).model_dump()
    prompt = first["prompt_token_ids"]
    mi = types.ModelInput.from_ints(prompt)

    def sdk(mt: int) -> list[int]:
        sp = types.SamplingParams(max_tokens=mt, seed=1, temperature=1.0, stop=[])
        return sc.sample(mi, 1, sp).result(timeout=120).sequences[0].tokens

    def chat_stream_first() -> None:
        for _ in oai.chat.completions.create(model=b.model, messages=MSGS, max_tokens=1, seed=1, stop=[],
                                             stream=True):
            return

    def chat(mt: int) -> list[int]:
        r = oai.chat.completions.create(model=b.model, messages=MSGS, max_tokens=mt, seed=1, stop=[])
        return r.model_dump()["choices"][0]["token_ids"]

    def comp(mt: int) -> list[int]:
        r = oai.completions.create(model=b.model, prompt=prompt, max_tokens=mt, seed=1, stop=[])
        return r.model_dump()["choices"][0]["token_ids"]

    assert sdk(n_tok) == chat(n_tok) == comp(n_tok), "the same request must draw the same tokens on both paths"
    cases = {"sample (SDK)": lambda: sdk(1), "/oai chat, stream (1st chunk)": chat_stream_first,
             "/oai chat": lambda: chat(1), "/oai completions": lambda: comp(1)}
    long = {"sample (SDK)": lambda: sdk(n_tok), "/oai chat": lambda: chat(n_tok),
            "/oai completions": lambda: comp(n_tok)}
    for f in list(cases.values()) + list(long.values()):   # warm-up
        f()
    t1: dict[str, list[float]] = {k: [] for k in cases}
    tl: dict[str, list[float]] = {k: [] for k in long}
    for _ in range(rounds):
        for k, f in cases.items():
            t = time.perf_counter()
            f()
            t1[k].append(time.perf_counter() - t)
        for k, f in long.items():
            t = time.perf_counter()
            f()
            tl[k].append(time.perf_counter() - t)
    base1, basel = statistics.median(t1["sample (SDK)"]), statistics.median(tl["sample (SDK)"])
    print(f"tiny model, CPU, prompt {len(prompt)} tokens, {rounds} interleaved rounds (medians)")
    print(f"{'path':32s} {'first token ms':>15s} {'vs sample':>10s}")
    for k, v in t1.items():
        m = statistics.median(v)
        print(f"{k:32s} {m * 1e3:15.2f} {(m - base1) * 1e3:+9.2f}")
    print(f"{'path':32s} {f'{n_tok}-token answer ms':>15s} {'tok/s':>10s} {'vs sample':>10s}")
    for k, v in tl.items():
        m = statistics.median(v)
        print(f"{k:32s} {m * 1e3:15.2f} {n_tok / m:10.1f} {(m - basel) * 1e3:+9.2f}")
    own_work(b, n_tok, tl["/oai chat"])


def own_work(b: BackendProc, n_tok: int, chat_times: list[float]) -> None:
    """The endpoint's own CPU work per request, without sampling and HTTP (the wall-clock differences
    above also hold machine noise): the chat template + tokenizer, decoding and parsing the answer,
    the JSON body with its logprobs."""
    tok = compat.tokenizer(str(b.model_path))
    answer = renderers.template_prompt_tokens(tok, [{"role": "user", "content": "x" * 200}], None)[:n_tok]
    msgs = renderers.normalize_messages(MSGS, strict=True)

    def work() -> None:
        prompt = renderers.template_prompt_tokens(tok, msgs, None)
        reply = parse_reply(renderers.completion_text(tok, answer, set(), []))
        lps = [{"token": tok.decode([t]), "logprob": -1.0, "bytes": [], "top_logprobs": []} for t in answer]
        json.dumps({"c": reply.content, "p": prompt, "t": answer, "l": lps})
        renderers.stream_pieces(tok, answer, reply.text)

    work()
    ts = []
    for _ in range(50):
        t = time.perf_counter()
        work()
        ts.append(time.perf_counter() - t)
    print(f"endpoint's own work per {n_tok}-token chat request (template, decode, parse, logprobs JSON, stream "
          f"pieces): median {statistics.median(ts) * 1e3:.2f} ms (target <= 5 ms)")


if __name__ == "__main__":
    main()
