"""Results people look at rather than read: the reward curve (PNG) and a static HTML viewer of
the run's trajectories (no server, no JavaScript framework: open the file in a browser)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure


def write_reports(run_dir: Path, result: dict[str, Any], name: str) -> None:
    plot_rewards(result, run_dir / "results" / name / "reward_curve.png")
    write_viewer(run_dir, result)


def _mismatch_points(steps: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(s["step"], s["metrics"][key]) for s in steps
            if isinstance((s.get("metrics") or {}).get(key), (int, float))]


def plot_mismatch(ax: Any, steps: list[dict[str, Any]]) -> None:
    """The second panel: the sampler/trainer |logprob diff| per step (cookbook/mismatch.py), log scale; hollow
    markers where the batch was sampled by older weights (the figure then includes that staleness)."""
    stale = {s["step"] for s in steps if (s.get("metrics") or {}).get("mismatch/staleness")}
    for key, label, colour in (("mismatch/abs_diff_mean", "mean |Δ|", "tab:purple"),
                               ("mismatch/abs_diff_max", "max |Δ|", "tab:brown")):
        pts = [(x, max(y, 1e-12)) for x, y in _mismatch_points(steps, key)]
        if not pts:
            continue
        ax.plot(*zip(*pts), lw=1, color=colour, label=label + (" (hollow: batch sampled by older weights)"
                                                               if stale and colour == "tab:purple" else ""))
        for hollow in (False, True):
            sel = [(x, y) for x, y in pts if (x in stale) == hollow]
            if sel:
                ax.plot(*zip(*sel), ls="", marker="o", ms=3, color=colour, mfc="white" if hollow else colour)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("|sampler - trainer| logprob")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)


def plot_rewards(result: dict[str, Any], out: Path) -> None:
    steps = result.get("steps", [])
    xs = [s["step"] for s in steps if isinstance(s.get("mean_reward"), (int, float))]
    ys = [s["mean_reward"] for s in steps if isinstance(s.get("mean_reward"), (int, float))]
    mismatch = bool(_mismatch_points(steps, "mismatch/abs_diff_mean"))
    fig = Figure(figsize=(7, 6) if mismatch else (7, 4), dpi=100)
    if mismatch:   # the RL steps' sampler/trainer mismatch under the reward curve
        ax, ax_m = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
        plot_mismatch(ax_m, steps)
    else:
        ax = fig.subplots()
    if xs:
        ax.plot(xs, ys, marker="o", ms=3, lw=1.2, label="mean reward")
        if len(ys) >= 5:
            k = 5
            avg = [sum(ys[max(0, i - k + 1): i + 1]) / len(ys[max(0, i - k + 1): i + 1]) for i in range(len(ys))]
            ax.plot(xs, avg, lw=2.2, label=f"moving average ({k})")
    losses = [(s["step"], s["loss_per_token"]) for s in steps if isinstance(s.get("loss_per_token"), (int, float))]
    if losses:
        ax2 = ax.twinx()
        ax2.plot(*zip(*losses), color="grey", alpha=0.5, lw=1, label="loss / token")
        ax2.set_ylabel("loss per token")
    held = (result.get("heldout") or {}).get("points") or []
    if held:   # evaluation points (cookbook/evaluation.py record): the held-out pass rate on the same axis
        split = (result.get("heldout") or {}).get("split", "heldout")
        ax.plot([p["step"] for p in held], [p["pass_rate"] for p in held], marker="s", ms=6, lw=1.5, ls="--",
                color="tab:red", label=f"{split} pass rate")
    if not mismatch:
        ax.set_xlabel("step")
    ax.set_ylabel("mean reward" if result.get("mode") != "sft" else "sampled pass rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(f"{result.get('mode')} on {result.get('model')}")
    if xs or held:
        ax.legend(loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


def _esc(x: Any) -> str:
    return html.escape(str(x))


def heldout_html(result: dict[str, Any]) -> list[str]:
    """The viewer's held-out section: before -> after, and every evaluation point."""
    h = result.get("heldout") or {}
    if not h.get("points"):
        return []
    b, a = h["before"], h["after"]
    rows = "".join(f"<tr><td>{p['step']}</td><td>{p['pass_rate']:.3f}</td><td>{p['mean_reward']:.3f}</td>"
                   f"<td>{p['n']}</td><td>{p.get('n_failed', 0)}</td></tr>" for p in h["points"])
    return [f"<h2>held-out evaluation ({_esc(h.get('split', 'heldout'))})</h2>",
            f"<p class='heldout'>pass rate before {b['pass_rate']:.3f} (step {b['step']}) &rarr; after "
            f"{a['pass_rate']:.3f} (step {a['step']}); {a['n']} scored rollouts per evaluation</p>",
            "<table><tr><th>step</th><th>pass rate</th><th>mean reward</th><th>n</th><th>unscored</th></tr>"
            f"{rows}</table>"]


def mismatch_cell(step: dict[str, Any]) -> str:
    """The step table's sampler/trainer cell: mean |Δ| / max |Δ| / kl_sample_train_v1 (cookbook/mismatch.py), and
    how many steps stale the batch was when the figures include policy lag (--max-steps-off-policy)."""
    m = step.get("metrics") or {}
    if not isinstance(m.get("mismatch/abs_diff_mean"), (int, float)):
        return ""
    cell = (f"{m['mismatch/abs_diff_mean']:.4g} / {m['mismatch/abs_diff_max']:.4g} / "
            f"{m['optim/kl_sample_train_v1']:.4g}")
    k = m.get("mismatch/staleness") or 0
    return cell + (f" ({k} step{'s' if k > 1 else ''} stale)" if k else "")


def write_viewer(run_dir: Path, result: dict[str, Any]) -> None:
    """run_dir/viewer.html: one section per step, one collapsible entry per rollout."""
    parts = [f"<!doctype html><meta charset='utf-8'><title>{_esc(run_dir.name)}</title>",
             "<style>body{font:14px sans-serif;margin:2em;max-width:1100px}pre{white-space:pre-wrap;"
             "background:#f6f6f6;padding:.6em;border-radius:4px}details{margin:.3em 0}summary{cursor:pointer}"
             ".r1{color:#070}.r0{color:#a00}.hack{color:#b50}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}</style>",
             f"<h1>{_esc(result.get('mode'))} run {_esc(run_dir.name)}</h1><p>model {_esc(result.get('model'))}</p>"]
    curve = next(iter(run_dir.glob("results/*/reward_curve.png")), None)
    if curve:
        parts.append(f"<img src='{_esc(curve.relative_to(run_dir))}' alt='reward curve'>")
    parts += heldout_html(result)
    steps = result.get("steps", [])
    with_mismatch = any(mismatch_cell(s) for s in steps)
    parts.append("<table><tr><th>step</th><th>mean reward</th><th>rollouts</th><th>failures (infra, agent, verifier, "
                 "retries, hack:&lt;kind&gt;)</th><th>time (s)</th>"
                 + ("<th title='sampler - trainer logprob on the sampled tokens (docs/recipes.md "
                    "&quot;Sampler/trainer mismatch&quot;)'>sampler/trainer: mean |&Delta;| / max |&Delta;| / "
                    "kl_sample_train_v1</th>" if with_mismatch else "") + "</tr>")
    for s in steps:
        mr = s.get("mean_reward")
        fails = ", ".join(f"{k} {v}" for k, v in (s.get("failures") or {}).items())
        parts.append(f"<tr><td><a href='#step{s['step']}'>{s['step']}</a></td>"
                     f"<td>{'' if mr is None else f'{mr:.3f}'}</td>"
                     f"<td>{_esc(s.get('n_rollouts', ''))}</td><td>{_esc(fails)}</td>"
                     f"<td>{s.get('time_s', 0):.1f}</td>"
                     + (f"<td class='mismatch'>{_esc(mismatch_cell(s))}</td>" if with_mismatch else "") + "</tr>")
    parts.append("</table>")
    for d in sorted(run_dir.glob("step_*")):
        step = d.name.split("_")[-1]
        parts.append(f"<h2 id='step{int(step)}'>step {int(step)}</h2>")
        for f in sorted(d.glob("rollout_*.json")):
            try:
                info = json.loads(f.read_text())
            except ValueError:
                continue
            txt = f.with_suffix(".txt").read_text() if f.with_suffix(".txt").exists() else ""
            r = info.get("reward")
            cls = "r1" if r == 1 else "r0"
            flags = (info.get("trajectory") or {}).get("verifier", {}).get("flags") or {}
            hack = (f" · <b class='hack'>{_esc(', '.join(flags))}</b>" if flags else "")
            parts.append(f"<details><summary class='{cls}'>{_esc(f.stem)} · task {_esc(info.get('task_id'))} · "
                         f"reward {_esc(r)}"
                         f" · advantage {_esc(info.get('advantage', ''))} · turns {_esc(info.get('turns_used'))} · "
                         f"{_esc(info.get('stop_reason'))}{hack}</summary><pre>{_esc(txt)}</pre></details>")
    (run_dir / "viewer.html").write_text("\n".join(parts))
