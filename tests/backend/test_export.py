"""Acceptance (issue 22): trained weights leave the stack.

`bash run.sh export` turns an SFT-trained checkpoint (LoRA merged, LoRA as a PEFT adapter, full fine-tuning)
into a directory that transformers/peft load with the backend's logprobs; the SDK's own
`tinker checkpoint download` works against the backend (save_weights_external, signed URLs, TTL, delete).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import httpx
import numpy as np
import pytest
import tinker
from tinker import types
from tinker_cookbook import weights

from helpers import REPO, RUNTIME_PY

TOKENS = [11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 222, 333]
CHECK = REPO / "tests" / "backend" / "export_check.py"


def _datum(ids):
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array(ids[1:], dtype=np.int64))})


def _sft(sc, model, rank, lr, steps=3):
    """A few SFT steps on TOKENS; returns (training client, backend logprobs before, after)."""
    tc = sc.create_lora_training_client(base_model=model, rank=rank, seed=5)  # rank 0: full fine-tuning
    d = _datum(TOKENS)
    before = tc.forward([d], "cross_entropy").result(60).loss_fn_outputs[0]["logprobs"].to_numpy()
    for _ in range(steps):
        tc.forward_backward([d], "cross_entropy").result(60)
        tc.optim_step(types.AdamParams(learning_rate=lr)).result(60)
    after = tc.forward([d], "cross_entropy").result(60).loss_fn_outputs[0]["logprobs"].to_numpy()
    assert np.abs(after - before).max() > 1e-2, "SFT did not move the weights"
    assert after.sum() > before.sum(), "SFT did not raise the logprobs of the trained sequence"
    return tc, after


def _hf_logprobs(*dirs_modes):
    """Logprobs of TOKENS from each exported (dir, "merged"|"adapter"), loaded with transformers/peft (one process)."""
    r = subprocess.run([RUNTIME_PY, str(CHECK), json.dumps(TOKENS), *(f"{d}:{m}" for d, m in dirs_modes)], cwd=REPO,
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(x["chat_template"] for x in res), "an exported tokenizer has no chat template"
    return [np.array(x["logprobs"]) for x in res]


def _export(backend, *args):
    return subprocess.run(["bash", "run.sh", "export", *args, "--config", str(backend.state_dir / "runtime.yaml")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_export_lora_and_full_match_backend_logprobs(backend, tmp_path):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    lora, lora_lp = _sft(sc, backend.model, rank=4, lr=2e-3)
    lora_path = lora.save_state("export-lora").result(60).path
    full, full_lp = _sft(sc, backend.model, rank=0, lr=1e-3)
    full_path = full.save_state("export-full").result(60).path

    cases = [(lora_path, "merged", lora_lp, []), (lora_path, "adapter", lora_lp, ["--adapter"]),
             (full_path, "merged", full_lp, [])]
    outs = []
    for path, mode, _, extra in cases:
        out = tmp_path / f"{path.split('/')[-1]}-{mode}"
        r = _export(backend, path, "--out", str(out), *extra)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert json.loads(r.stdout)["format"] == ("peft_adapter" if mode == "adapter" else "merged")
        outs.append((out, mode))
    for (path, mode, expected, _), got in zip(cases, _hf_logprobs(*outs)):
        np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=f"{path} exported as {mode}: logprobs differ")

    r = _export(backend, full_path, "--out", str(tmp_path / "nope"), "--adapter")
    assert r.returncode == 2 and "full fine-tuning checkpoint" in r.stderr and "drop --adapter" in r.stderr, r.stderr
    r = _export(backend, "tinker://nobody/weights/none", "--out", str(tmp_path / "nope"))
    assert r.returncode == 2 and "does not exist" in r.stderr, r.stderr


def test_sdk_checkpoint_download(backend, tmp_path):
    """`tinker checkpoint download` (SDK CLI): create_training_client_from_state -> save_weights_external ->
    external_weights_urls -> signed GETs -> set TTL -> delete the temporary export."""
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc, lp = _sft(sc, backend.model, rank=4, lr=2e-3)
    path = tc.save_state("download-me").result(60).path
    env = dict(os.environ, TINKER_BASE_URL=backend.url, TINKER_API_KEY=backend.key)
    t0 = time.time()
    r = subprocess.run([str(REPO / ".venv-control" / "bin" / "tinker"), "--format", "json", "checkpoint", "download",
                        path,
                        "--output", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    dest = tmp_path / path.replace("tinker://", "").replace("/", "_")
    assert (dest / "adapter_model.safetensors").exists() and (dest / "tokenizer_config.json").exists(), \
        list(dest.iterdir())
    np.testing.assert_allclose(_hf_logprobs((dest, "adapter"))[0], lp, atol=1e-4)
    rc = sc.create_rest_client()
    model_id = path.split("/")[2]
    assert time.time() - t0 < 240
    # the CLI's temporary export (on the run it created) is gone; the source checkpoint is untouched
    runs = rc.list_user_checkpoints().result(60).checkpoints
    assert not [c for c in runs if c.checkpoint_type == "external"], runs
    assert path in {c.tinker_path for c in rc.list_checkpoints(model_id).result(60).checkpoints}


def test_cookbook_weights_download(backend, tmp_path):
    """tinker_cookbook.weights.download of a training checkpoint: its temporary export is age-encrypted to a
    one-off key, downloaded, decrypted and deleted."""

    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc, lp = _sft(sc, backend.model, rank=4, lr=2e-3)
    path = tc.save_state("cookbook-download").result(60).path
    out = weights.download(tinker_path=path, output_dir=str(tmp_path / "adapter"), base_url=backend.url)
    assert not list((tmp_path / "adapter").rglob("*.age"))
    np.testing.assert_allclose(_hf_logprobs((out, "adapter"))[0], lp, atol=1e-4)
    runs = sc.create_rest_client().list_user_checkpoints().result(60).checkpoints
    assert not [c for c in runs if c.checkpoint_type == "external"], runs


def test_external_weights_urls_ttl_and_signatures(backend):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=backend.model, rank=2, seed=1)
    ext = tc.save_weights_external("ext", ttl_seconds=3600).result(120).path
    rc = sc.create_rest_client()
    listed = {c.tinker_path: c for c in rc.list_checkpoints(tc.model_id).result(60).checkpoints}
    assert listed[ext].checkpoint_type == "external" and listed[ext].expires_at is not None
    urls = rc.get_external_weights_urls(ext).result(60)
    assert {"adapter_config.json", "adapter_model.safetensors", "local_tinker_export.json"} <= set(urls.urls)
    url = urls.urls["adapter_config.json"]
    # no API key needed: the signature is the grant
    assert httpx.get(url).json()["r"] == 2
    assert httpx.get(url.replace("sig=", "sig=0")).status_code == 403       # tampered
    assert httpx.get(url.replace("adapter_config.json", "..%2Fmeta.json")).status_code in (403, 404)
    with pytest.raises(tinker.BadRequestError, match="ttl_seconds must be"):
        rc.set_checkpoint_ttl_from_tinker_path(ext, 60).result(30)
    rc.set_checkpoint_ttl_from_tinker_path(ext, None).result(30)
    listed = rc.list_checkpoints(tc.model_id).result(60).checkpoints
    assert next(c for c in listed if c.tinker_path == ext).expires_at is None
    rc.delete_checkpoint_from_tinker_path(ext).result(30)
    with pytest.raises(tinker.NotFoundError):
        rc.get_external_weights_urls(ext).result(30)
    assert httpx.get(url).status_code == 404
