"""losses.py on hand-built tensors (issue 41): gspo (token-level GSPO, arXiv 2507.18071) and the sampler/trainer
mismatch corrections (this backend's loss_fn_config extensions tis_threshold, mask_ratio_low, mask_ratio_high), values
and gradients with respect to the trainer's logprobs; and wire.loss_config's checks of them."""

from __future__ import annotations

import math

import pytest
import torch

from services.backend import losses, wire
from services.backend.errors import BadRequest

# 6 positions: a prompt position (advantage 0, outside the ratio mask) and 5 sampled ones, ratios on both sides of 1
LP = [-0.5, -1.0, -2.0, -0.3, -1.5, -0.8]
Q = [0.0, -1.2, -1.4, -0.3, -2.5, -1.1]      # log r = lp - q: 0.2, -0.6, 0.0, 1.0, 0.3 at the sampled positions
A = [0.0, 1.0, -1.0, 2.0, 1.0, -0.5]
MASK = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def inputs(q=Q, a=A, mask=MASK) -> dict[str, torch.Tensor]:
    return {"logprobs": torch.tensor(q), "advantages": torch.tensor(a), "sequence_ratio_mask": torch.tensor(mask)}


def value_and_jacobian(loss_fn: str, cfg: dict[str, float] | None, lp=LP, x=None):
    """The elementwise loss and its Jacobian d el_t / d lp_j ([N, N]) of a loss with its defaults filled in."""
    fn, full = losses.loss(loss_fn, cfg)
    x = x or inputs()
    lp_t = torch.tensor(lp, requires_grad=True)
    el = fn(lp_t, x, full)
    jac = torch.stack([torch.autograd.grad(el[t], lp_t, retain_graph=True)[0] for t in range(len(lp))])
    return el.detach(), jac


def test_gspo_matches_the_documented_token_level_formula():
    lo, hi = 0.9, 1.1
    el, jac = value_and_jacobian("gspo", {"clip_low_threshold": lo, "clip_high_threshold": hi})
    log_s = sum(lp - q for lp, q, m in zip(LP, Q, MASK) if m) / sum(MASK)
    s = math.exp(log_s)                          # exp(0.18) = 1.197: above hi, so the clip acts where A > 0
    assert s > hi
    for t, a in enumerate(A):
        # every token carries the sequence ratio's value ...
        assert el[t].item() == pytest.approx(-min(s * a, min(max(s, lo), hi) * a), rel=1e-6, abs=1e-7)
        # ... and only its own logprob's gradient (s is detached): d el_t / d lp_t = -A s where min takes r_t A
        unclipped = s * a <= min(max(s, lo), hi) * a
        assert jac[t, t].item() == pytest.approx(-a * s if unclipped and a else 0.0, rel=1e-6, abs=1e-7)
        assert all(jac[t, j].item() == 0.0 for j in range(len(A)) if j != t)


def test_gspo_ratio_is_the_sequence_ratio_over_the_mask_only():
    """A per-token ratio, or a mean over every position, gives other values: the mask decides which positions count,
    and a position outside it (advantage non-zero) still carries s."""
    big = {"clip_low_threshold": 0.0, "clip_high_threshold": 100.0}   # no clipping: el_t = -s A_t
    mask = [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    el, _ = value_and_jacobian("gspo", big, x=inputs(mask=mask))
    s = math.exp(((LP[1] - Q[1]) + (LP[2] - Q[2])) / 2)
    for t, a in enumerate(A):
        assert el[t].item() == pytest.approx(-s * a, rel=1e-6, abs=1e-7)
    el_token, _ = value_and_jacobian("ppo", big)
    assert not torch.allclose(el, el_token)


def test_gspo_default_clip_is_the_papers_range():
    _, cfg = losses.loss("gspo", None)
    assert (cfg["clip_low_threshold"], cfg["clip_high_threshold"]) == pytest.approx((1 - 3e-4, 1 + 4e-4))
    # on-policy (lp = q): s = 1, inside the range; the loss is -A and its gradient -A per token
    el, jac = value_and_jacobian("gspo", None, lp=Q)
    assert torch.allclose(el, -torch.tensor(A))
    assert torch.allclose(torch.diagonal(jac), -torch.tensor(A))


def r_of(lp=LP, q=Q) -> torch.Tensor:
    return torch.exp(torch.tensor(lp) - torch.tensor(q))


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "gspo"])
def test_corrections_off_change_nothing(loss_fn):
    el0, j0 = value_and_jacobian(loss_fn, None)
    el1, j1 = value_and_jacobian(loss_fn, {"tis_threshold": 0.0, "mask_ratio_low": 0.0, "mask_ratio_high": 0.0})
    assert torch.equal(el0, el1) and torch.equal(j0, j1)


def test_tis_on_importance_sampling_value_and_gradient():
    """-A r sg(min(r, C)/r): value -A min(r, C), gradient -A min(r, C) (d/dlp of r is r)."""
    C = 1.5
    el, jac = value_and_jacobian("importance_sampling", {"tis_threshold": C})
    r = r_of()
    truncated = torch.minimum(r, torch.tensor(C))
    assert r.max() > C   # the test truncates something
    assert torch.allclose(el, -torch.tensor(A) * truncated, rtol=1e-6, atol=1e-7)
    assert torch.allclose(jac, torch.diag(-torch.tensor(A) * truncated), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss_fn", ["ppo", "cispo", "gspo"])
def test_tis_multiplies_the_loss_and_its_gradient_by_the_detached_weight(loss_fn):
    C = 1.5
    el0, j0 = value_and_jacobian(loss_fn, None)
    el, jac = value_and_jacobian(loss_fn, {"tis_threshold": C})
    w = torch.clamp(C / r_of(), max=1.0)         # min(r, C) / r
    assert (w < 1).any()
    assert torch.allclose(el, el0 * w, rtol=1e-6, atol=1e-7)
    assert torch.allclose(jac, j0 * w[:, None], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "gspo"])
@pytest.mark.parametrize("low,high", [(0.7, 1.5), (0.7, 0.0), (0.0, 1.5)])
def test_mask_zeroes_tokens_outside_the_band(loss_fn, low, high):
    el0, j0 = value_and_jacobian(loss_fn, None)
    el, jac = value_and_jacobian(loss_fn, {"mask_ratio_low": low, "mask_ratio_high": high})
    r = r_of()
    keep = (r >= low) & ((r <= high) if high else torch.ones_like(r, dtype=torch.bool))
    assert not keep.all() and keep.sum() >= 2    # the band drops some tokens, keeps others
    assert torch.equal(el, torch.where(keep, el0, torch.zeros_like(el0)))
    assert torch.equal(jac, torch.where(keep[:, None], j0, torch.zeros_like(j0)))


def test_tis_and_mask_together():
    el0, j0 = value_and_jacobian("ppo", {"clip_low_threshold": 0.0, "clip_high_threshold": 10.0})
    el, jac = value_and_jacobian("ppo", {"clip_low_threshold": 0.0, "clip_high_threshold": 10.0, "tis_threshold": 2.0,
                                         "mask_ratio_low": 0.6})
    r = r_of()
    w = torch.where(r >= 0.6, torch.clamp(2.0 / r, max=1.0), torch.zeros_like(r))
    assert torch.allclose(el, el0 * w) and torch.allclose(jac, j0 * w[:, None])


def test_tis_of_a_huge_ratio_stays_finite():
    lp, q = [-0.1], [-200.0]    # r = exp(199.9) overflows float32
    x = {"logprobs": torch.tensor(q), "advantages": torch.tensor([1.0])}
    fn, cfg = losses.loss("cispo", {"tis_threshold": 2.0})
    lp_t = torch.tensor(lp, requires_grad=True)
    el = fn(lp_t, x, cfg)
    el.sum().backward()
    assert torch.isfinite(el).all() and torch.isfinite(lp_t.grad).all()


# ------------------------------------------------------------------ wire.loss_config
def test_loss_config_accepts_the_extensions_and_fills_defaults():
    required, cfg = wire.loss_config("gspo", {"tis_threshold": 2, "mask_ratio_low": 0.5, "mask_ratio_high": 2.0})
    assert required == ("logprobs", "advantages", "sequence_ratio_mask")
    assert cfg == {"clip_low_threshold": 1 - 3e-4, "clip_high_threshold": 1 + 4e-4, "tis_threshold": 2.0,
                   "mask_ratio_low": 0.5, "mask_ratio_high": 2.0}
    for name in ("importance_sampling", "ppo", "cispo"):
        assert wire.loss_config(name, {"tis_threshold": 3.0})[1]["tis_threshold"] == 3.0


@pytest.mark.parametrize("loss_fn,cfg,match", [
    ("ppo", {"tis_threshold": -1.0}, "tis_threshold.*>= 0"),
    ("gspo", {"mask_ratio_low": -0.1}, "mask_ratio_low.*>= 0"),
    ("cispo", {"mask_ratio_low": 2.0, "mask_ratio_high": 1.5}, "mask_ratio_low 2.0 must be <= mask_ratio_high 1.5"),
    ("gspo", {"clip_low_threshold": 1.2, "clip_high_threshold": 1.1}, "clip_low_threshold must be <="),
    ("dro", {"tis_threshold": 2.0}, "unknown loss_fn_config key 'tis_threshold' for dro"),
    ("cross_entropy", {"mask_ratio_low": 0.5}, "unknown loss_fn_config key"),
    ("ppo", {"tis": 2.0}, r"unknown loss_fn_config key 'tis' for ppo \(allowed: clip_low_threshold, "
                          r"clip_high_threshold, tis_threshold, mask_ratio_low, mask_ratio_high\)"),
    ("ppo", {"tis_threshold": float("nan")}, "finite number"),
    ("stable_reinforce", None, "stable_reinforce.*not supported.*supported: cross_entropy, importance_sampling, ppo, "
                               "cispo, gspo, dro"),
])
def test_loss_config_refusals(loss_fn, cfg, match):
    with pytest.raises(BadRequest, match=match):
        wire.loss_config(loss_fn, cfg)


def test_mask_band_may_be_one_sided_or_a_point():
    assert wire.loss_config("ppo", {"mask_ratio_low": 2.0})[1]["mask_ratio_low"] == 2.0   # high off: no order check
    assert wire.loss_config("ppo", {"mask_ratio_low": 1.0, "mask_ratio_high": 1.0})[1]["mask_ratio_high"] == 1.0


def test_clip_ratio_is_what_each_clipped_loss_clips():
    """microbatch_loss counts clipped tokens with it: gspo's sequence ratio at every position, r elsewhere."""
    lp, x = torch.tensor(LP), inputs()
    s = math.exp(sum(a - b for a, b, m in zip(LP, Q, MASK) if m) / sum(MASK))
    assert torch.allclose(losses.clip_ratio("gspo", lp, x), torch.full((len(LP),), s))
    for name in ("ppo", "cispo"):
        assert torch.allclose(losses.clip_ratio(name, lp, x), r_of())
