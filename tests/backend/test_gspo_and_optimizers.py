"""Issue 41 through the official SDK against the test backend: the ``gspo`` loss against a float32 torch reference
(loss, elementwise loss, and its gradient through the update it causes), the mismatch corrections reaching the loss,
and the refusals: a datum without ``sequence_ratio_mask`` (or marking nothing), and the Dimuon optimizer at
create_model and at optim_step (its update rule is not public)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tinker
import torch
from tinker import types

PROMPT = [812, 31, 42, 53, 64, 75, 86, 97]
COMPLETIONS = [[401, 402, 403, 404, 405, 406, 407], [1501, 77, 2600, 9, 3100, 4000]]
# log(p/q) per completion token: datum 0's mean is 0.02 (its s = 1.02, inside the clip range below), datum 1's 0.25
# (s = 1.28, above it), while single tokens lie on both sides: a per-token ratio would clip other tokens
DELTAS = [[0.3, -0.2, 0.1, -0.3, 0.2, 0.0, 0.04], [0.6, -0.4, 0.9, 0.1, 0.3, 0.0]]
ADVS = [[1.0] * 7, [1.0, -0.5, 2.0, -1.0, 0.5, 1.5]]
CLIP = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
# AdamW with beta1 = 0 and an eps far above every gradient entry: the update lr * g / (|g| + eps) is ~ (lr / eps) g,
# so the updated logprobs follow the gradient's size, not only its sign (Adam's first step alone would be ~ lr sign(g))
ADAM = types.AdamParams(learning_rate=0.5, beta1=0.0, beta2=0.999, eps=10.0)


def datums(lp0: list[np.ndarray] | None) -> list[types.Datum]:
    """The two datums; with the current logprobs ``lp0`` their sampling logprobs q = lp0 - delta on the completion
    (0 at the prompt, as the cookbook sends), advantages on the completion, and for datum 1 non-binary weights."""
    out = []
    for i, comp in enumerate(COMPLETIONS):
        toks = PROMPT + comp
        n, k = len(toks) - 1, len(comp)
        lp = lp0[i] if lp0 is not None else np.zeros(n, np.float32)
        q = np.zeros(n, np.float32)
        q[-k:] = lp[-k:] - np.asarray(DELTAS[i], np.float32)
        adv = np.zeros(n, np.float32)
        adv[-k:] = ADVS[i]
        mask = np.zeros(n, np.float32)
        mask[-k:] = 1.0
        inputs = {"target_tokens": np.asarray(toks[1:], np.int64), "logprobs": q, "advantages": adv,
                  "sequence_ratio_mask": mask}
        if i == 1:
            inputs["weights"] = np.where(mask > 0, np.linspace(0.5, 2.0, n), 0.0).astype(np.float32)
        out.append(types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]),
                               loss_fn_inputs={k2: types.TensorData.from_numpy(v) for k2, v in inputs.items()}))
    return out


def inputs_of(d: types.Datum) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v.to_numpy(), dtype=torch.float32) for k, v in d.loss_fn_inputs.items()
            if k != "target_tokens"}


def reference_gspo(lp: torch.Tensor, x: dict[str, torch.Tensor], cfg: dict[str, float]) -> torch.Tensor:
    """Tinker's GSPO page, written out in float32 torch: the elementwise loss (times weights when present), with
    the mismatch corrections of this backend when set."""
    in_ratio = x["sequence_ratio_mask"] != 0
    log_ratio = (lp.detach() - x["logprobs"])[in_ratio].mean()
    ratio = torch.exp(log_ratio + lp - lp.detach())
    clipped = torch.clamp(ratio, cfg["clip_low_threshold"], cfg["clip_high_threshold"])
    el = -torch.min(ratio * x["advantages"], clipped * x["advantages"])
    r_tok = torch.exp(lp.detach() - x["logprobs"])
    if cfg.get("tis_threshold"):
        el = el * torch.clamp(r_tok, max=cfg["tis_threshold"]) / r_tok
    if cfg.get("mask_ratio_low"):
        el = torch.where(r_tok < cfg["mask_ratio_low"], 0.0, el)
    if cfg.get("mask_ratio_high"):
        el = torch.where(r_tok > cfg["mask_ratio_high"], 0.0, el)
    return el * x.get("weights", torch.ones_like(lp))


def logprobs(tc, data) -> list[np.ndarray]:
    return [o["logprobs"].to_numpy() for o in tc.forward(data, "cross_entropy").result(60).loss_fn_outputs]


@pytest.fixture(scope="module")
def sc(backend):
    return tinker.ServiceClient(base_url=backend.url, api_key=backend.key)


def test_gspo_matches_a_float32_torch_reference(sc, backend):
    # two adapters from one seed: identical weights; one trains with the built-in gspo, the other with the reference
    # as a custom loss (the SDK sends its exact gradient as cross-entropy weights)
    tc, ref = (sc.create_lora_training_client(base_model=backend.model, rank=4, seed=11) for _ in range(2))
    lp0 = logprobs(tc, datums(None))
    np.testing.assert_array_equal(lp0[0], logprobs(ref, datums(None))[0])
    data = datums(lp0)

    out = tc.forward_backward(data, "gspo", CLIP).result(60)
    expected = 0.0
    for d, o in zip(data, out.loss_fn_outputs):
        lp = torch.tensor(o["logprobs"].to_numpy())
        el = reference_gspo(lp, inputs_of(d), CLIP)
        np.testing.assert_allclose(o["elementwise_loss"].to_numpy(), el.numpy(), rtol=1e-5, atol=1e-6)
        expected += float(el.sum())
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # the clip fraction counts datum 1's 6 tokens (its s is outside [0.9, 1.1]) of the 13 with an advantage
    assert out.metrics.get("clip_fraction:mean", 6 / 13) == pytest.approx(6 / 13)

    def custom(batch, lps):
        total = sum(reference_gspo(lp, inputs_of(d), CLIP).sum() for d, lp in zip(batch, lps))
        return total, {}

    out_ref = ref.forward_backward_custom(data, custom).result(60)
    assert out_ref.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    step, step_ref = tc.optim_step(ADAM).result(60), ref.optim_step(ADAM).result(60)
    g, g_ref = step.metrics["grad_norm:mean"], step_ref.metrics["grad_norm:mean"]
    assert g > 0 and g == pytest.approx(g_ref, rel=1e-4), (g, g_ref)
    moved, moved_ref = logprobs(tc, data), logprobs(ref, data)
    for a, b, before in zip(moved, moved_ref, lp0):
        assert np.abs(a - before).max() > 1e-3, "the step did not move the weights"
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-5 + 1e-3 * np.abs(b - before).max())


def test_gspo_with_the_mismatch_corrections(sc, backend):
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=12)
    data = datums(logprobs(tc, datums(None)))
    for extra in ({"tis_threshold": 1.5}, {"mask_ratio_low": 0.9, "mask_ratio_high": 1.3},
                  {"tis_threshold": 2.0, "mask_ratio_low": 0.8}):
        cfg = {**CLIP, **extra}
        out = tc.forward(data, "gspo", cfg).result(60)
        plain = tc.forward(data, "gspo", CLIP).result(60)
        expected = sum(float(reference_gspo(torch.tensor(o["logprobs"].to_numpy()), inputs_of(d), cfg).sum())
                       for d, o in zip(data, out.loss_fn_outputs))
        assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-6), extra
        assert out.metrics["loss:sum"] != pytest.approx(plain.metrics["loss:sum"], rel=1e-3), extra  # it acted
    for name in ("importance_sampling", "ppo", "cispo"):   # accepted by the other corrected losses
        tc.forward(data, name, {"tis_threshold": 2.0, "mask_ratio_low": 0.5, "mask_ratio_high": 2.0}).result(60)


def test_gspo_refusals(sc, backend):
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=13)
    data = datums(None)
    without = [types.Datum(model_input=d.model_input,
                           loss_fn_inputs={k: v for k, v in d.loss_fn_inputs.items() if k != "sequence_ratio_mask"})
               for d in data]
    with pytest.raises(tinker.BadRequestError, match=r"datum 0: loss_fn 'gspo' needs loss_fn_inputs\['sequence_ratio"):
        tc.forward(without, "gspo").result(30)
    empty = [types.Datum(model_input=d.model_input, loss_fn_inputs={
        **d.loss_fn_inputs, "sequence_ratio_mask": types.TensorData.from_numpy(
            np.zeros(d.model_input.length, np.float32))}) for d in data]
    with pytest.raises(tinker.BadRequestError, match="datum 0: sequence_ratio_mask marks no position"):
        tc.forward(empty, "gspo").result(30)
    with pytest.raises(tinker.BadRequestError, match="mask_ratio_low 2.0 must be <= mask_ratio_high 1.5"):
        tc.forward(data, "gspo", {"mask_ratio_low": 2.0, "mask_ratio_high": 1.5}).result(30)
    with pytest.raises(tinker.BadRequestError, match="tis_threshold.*>= 0"):
        tc.forward(data, "ppo", {"tis_threshold": -1.0}).result(30)
    with pytest.raises(tinker.BadRequestError, match="unknown loss_fn_config key 'kl_coeff' for gspo"):
        tc.forward(data, "gspo", {"kl_coeff": 0.1}).result(30)
    with pytest.raises(tinker.BadRequestError, match="stable_reinforce.*supported: .*gspo"):
        tc.forward(data, "stable_reinforce").result(30)


DIMUON = "unsupported optimizer_config type 'dimuon'.*adamw optimizer family only.*Dimuon's update rule is not public"


def test_dimuon_is_refused_at_create_model(sc, backend):
    with pytest.raises(tinker.BadRequestError, match=DIMUON):
        sc.create_lora_training_client(base_model=backend.model, rank=4, optimizer=types.DimuonOptimizerConfig()
                                       ).result(60)


def test_dimuon_is_refused_at_optim_step(sc, backend):
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=14)
    data = datums(None)
    tc.forward_backward(data, "cross_entropy").result(60)
    with pytest.raises(tinker.BadRequestError, match="unsupported optimizer_params type 'dimuon'.*adamw optimizer "
                                                     "family only.*not public"):
        tc.optim_step(types.DimuonParams(learning_rate=1e-3)).result(60)


def test_optimizer_refusals_raw(backend):
    """The JSON bodies the SDK sends (and malformed ones), without the SDK: 400 with the reason, never a 5xx."""
    with httpx.Client(base_url=backend.url, headers={"X-API-Key": backend.key}, timeout=60) as c:
        sid = c.post("/api/v1/create_session", json={"tags": [], "user_metadata": {},
                                                      "sdk_version": "0.38.0"}).json()["session_id"]
        base = {"session_id": sid, "model_seq_id": 0, "base_model": backend.model, "lora_config": {"rank": 4},
                "type": "create_model"}
        for oc, match in (({"type": "dimuon", "version": 1}, "adamw optimizer family only"),
                          ("adamw", "optimizer_config must be an object")):
            r = c.post("/api/v1/create_model", json={**base, "optimizer_config": oc})
            assert r.status_code == 400 and match in r.json()["detail"], r.text
        r = c.post("/api/v1/create_model", json={**base, "optimizer_config": {"type": "adamw"}})
        assert r.status_code == 200, r.text
        model_id = r.json()["model_id"]
        for _ in range(30):   # the model is loaded inside the future
            f = c.post("/api/v1/retrieve_future", json={"request_id": r.json()["request_id"]})
            if f.status_code != 408:
                break
        assert f.status_code == 200 and f.json().get("model_id") == model_id, f.text
        for op, match in (({"type": "dimuon", "learning_rate": 1e-3, "grad_clip_norm": 0.0, "beta1": 0.9},
                           "unsupported optimizer_params type 'dimuon'"),
                          ("dimuon", "optimizer_params must be an object")):
            r = c.post("/api/v1/optim_step", json={"model_id": model_id, "seq_id": 1, "type": "optim_step",
                                                   "optimizer_params": op})
            assert r.status_code == 400 and match in r.json()["detail"], r.text
