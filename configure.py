#!/usr/bin/env python3
"""Write the project's configs (config/*.yaml) from templates/*.yaml.

    python configure.py                         # embedded default: tiny model, CPU, local sandboxes
    python configure.py --model /data/Qwen3-4B-Instruct-2507 --model-name Qwen/Qwen3-4B-Instruct-2507 --device cuda
    python configure.py --rock-base-url http://rock-admin:8080 --rock-cluster default   # sandboxes on a ROCK cluster
        [--rock-header X-Key=... --rock-header X-User-Id=...]                          # its auth/routing headers
    python configure.py --ray-trainers 2 --ray-samplers 2 --ray-address auto  # the runtime on Ray (docs/ray.md)
    python configure.py --task-root "$PWD" --task-id sympy__sympy-19637 --rollout-only   # the seed's flags
        [--roll-root R --outer-image IMG --node-ip IP --model M]       (docs/seed-mapping.md)

It refuses to overwrite a config you edited (pass --force to regenerate anyway); configs it
wrote itself and that are unchanged are regenerated freely. Every value it writes is printed.
Budgets (tokens, turns, timeouts) live in one place: config/harbor.yaml.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import os
import re
import secrets
import sys
from pathlib import Path

from services.common.defaults import TINY_MODEL_NAME as TINY_NAME  # the embedded tiny model (defined once)
from services.common.defaults import TINY_MODEL_PATH as TINY_PATH
from services.common.hashing import sha256_file
from services.common.paths import TASK_ROOT, config_dir  # where every service reads its configs (one owner)

ROOT = Path(__file__).resolve().parent
TEMPLATES = ROOT / "templates"
MANIFEST = ".configure-manifest.json"
PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
SEED_RECORD = "manifest.json"   # the seed's record of this configuration (not a template: written from the flags)
TASK_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")   # owner__name-NNN (SWE-bench style) or a built-in id
IMAGE_REF = re.compile(r"[a-z0-9][a-z0-9._/:@-]*")


def detect_device() -> str:
    try:
        import torch  # noqa: PLC0415 (set-up with LTS_TORCH_INDEX=none leaves the control venv without torch)

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001  (control venv without torch, or no torch at all)
        return "cpu"


def model_settings(args) -> dict[str, str]:
    if args.model in (None, "", "tiny"):
        return {"model_name": TINY_NAME, "model_path": TINY_PATH, "tokenizer_id": TINY_NAME}
    p = Path(args.model).expanduser()
    if p.exists():
        if not (p / "config.json").exists():
            sys.exit(f"configure.py: {p} has no config.json: --model must be a local HF model directory or an HF id")
        name = args.model_name or _hf_id_from_dir(p) or p.name
        return {"model_name": name, "model_path": str(p.resolve()),
                "tokenizer_id": args.tokenizer_id or str(p.resolve())}
    if re.fullmatch(r"[\w.-]+/[\w.-]+", args.model):  # an HF id, resolved from the local HF cache (offline)
        return {"model_name": args.model_name or args.model, "model_path": args.model,
                "tokenizer_id": args.tokenizer_id or args.model}
    sys.exit(f"configure.py: --model {args.model!r} is neither an existing directory nor an HF id like org/name")


def model_config(model: str | None) -> dict | None:
    """config.json of a local HF model directory, None if there is none."""
    cfg_path = Path(model).expanduser() / "config.json" if model else None
    return json.loads(cfg_path.read_text()) if cfg_path is not None and cfg_path.exists() else None


def approx_params(model: str | None) -> float | None:
    """Parameters of a local HF model directory from its config.json (12·L·h² + vocab·h), None if unknown."""
    cfg = model_config(model)
    if cfg is None:
        return None
    h, n, vocab = cfg.get("hidden_size"), cfg.get("num_hidden_layers"), cfg.get("vocab_size")
    return 12 * n * h * h + vocab * h if h and n and vocab else None


def gpu_microbatch_tokens(model: str | None) -> int:
    """forward_backward micro-batch on a GPU: 65,536 tokens for models under 2 B parameters (a 0.6B GRPO
    forward_backward is host-bound at 16,384: 28.0k -> 37.9k tok/s with checkpointing, 7.2 -> 10.0 GB peak,
    docs/performance.md), 16,384 otherwise."""
    n = approx_params(model)
    return 65536 if n is not None and n < 2e9 else 16384


def _hf_id_from_dir(p: Path) -> str | None:
    try:
        cfg = json.loads((p / "config.json").read_text())
        name = cfg.get("_name_or_path") or ""
        return name if re.fullmatch(r"[\w.-]+/[\w.-]+", name) else None
    except Exception:  # noqa: BLE001
        return None


def _secret(out: Path, name: str, make) -> str:
    """Generated keys are kept in config/.secrets.json so re-running configure.py keeps them."""
    path = out / ".secrets.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    if name not in data:
        data[name] = make()
        path.write_text(json.dumps(data, indent=1))
        os.chmod(path, 0o600)
    return data[name]


def _ray(args) -> str:
    """engine.ray (flow mapping), or null: the in-process runtime."""
    if args.ray_trainers is None and args.ray_samplers is None and args.ray_address is None:
        return "null"
    t, s = args.ray_trainers or 1, args.ray_samplers or 1
    if t < 1 or s < 1:
        sys.exit("configure.py: --ray-trainers and --ray-samplers must be >= 1")
    return "{address: %s, trainers: %d, samplers: %d}" % (args.ray_address or "local", t, s)


def values(args, out: Path) -> dict[str, str]:
    device = args.device if args.device != "auto" else detect_device()
    gpu = device.startswith("cuda")
    v = {
        **model_settings(args),
        "device": device,
        "dtype": args.dtype or ("bfloat16" if gpu else "float32"),
        "threads": str(args.threads),
        "microbatch_tokens": str(args.microbatch_tokens or (gpu_microbatch_tokens(args.model) if gpu else 8192)),
        "grad_ckpt": "true" if gpu else "false",
        "sampler": args.sampler,
        "sampler_options": "{kv_cache_gb: %s, max_context: %d}" % (args.kv_cache_gb,
                                                                   args.sampler_context) if gpu else "{}",
        "backend_port": str(args.port),
        "admin_port": str(args.admin_port),
        "api_key": (args.api_key or os.environ.get("TINKER_API_KEY")
                    or _secret(out, "api_key", lambda: f"tml-local-{secrets.token_hex(12)}")),
        "sandbox_key": args.sandbox_key or _secret(out, "sandbox_key", lambda: f"sbx-{secrets.token_hex(12)}"),
        "sandbox_flavor": "rock" if (args.rock_base_url or args.sandbox_backend == "rock") else "local",
        "sandbox_base_url": args.rock_base_url or f"http://127.0.0.1:{args.admin_port}",
        "admin_backend": "docker" if args.sandbox_backend == "docker" else "local",
        "rock_cluster": args.rock_cluster or "null",
        "rock_headers": json.dumps(dict(h.split("=", 1) for h in args.rock_header)),
        "rollout_only": "true" if args.rollout_only else "false",
        "ray": _ray(args),
        "task_root": json.dumps(str(task_root(args))),
        "task_id": json.dumps(args.task_id) if args.task_id else "null",
        "worker_port": str(args.worker_port),
    }
    if not v["api_key"].startswith("tml-"):
        sys.exit("configure.py: --api-key must start with 'tml-' (the tinker SDK refuses other keys)")
    return v


def task_root(args) -> Path:
    """--task-root, else the seed's $TASK (services.common.paths), else the repo root."""
    return Path(args.task_root).expanduser().resolve() if args.task_root else (TASK_ROOT or ROOT)


def check_seed_flags(args, ap: argparse.ArgumentParser) -> list[str]:
    """Validate the seed's flags (docs/seed-mapping.md); returns notes on what each does here (printed)."""
    notes = []
    if args.roll_root is not None:
        rr = Path(args.roll_root).expanduser()
        if not rr.is_dir():
            ap.error(f"--roll-root {args.roll_root}: no such directory (a checkout of ROLL)")
        notes.append(f"--roll-root {rr.resolve()}: recorded in manifest.json; the project's own runtime trains and "
                     "samples here (no ROLL pipeline is launched)")
    if args.task_root is not None and not task_root(args).is_dir():
        ap.error(f"--task-root {args.task_root}: no such directory")
    if args.task_id is not None:
        if not TASK_ID.fullmatch(args.task_id):
            ap.error(f"--task-id {args.task_id!r}: expected an id like owner__name-123 (letters, digits, _ . -)")
        found = find_task(args.task_id, task_root(args))
        if found is None:
            ap.error(f"--task-id {args.task_id}: no built-in task of that id (datasets/*/) and no "
                     f"{task_root(args) / 'assets' / 'harbor-tasks' / args.task_id}/task.toml; copy one there with "
                     f"`prepare_sandbox.py --task DIR --task-id {args.task_id}`")
        notes.extend(task_backend(args, found, ap))
    if args.outer_image is not None:
        if not IMAGE_REF.fullmatch(args.outer_image):
            ap.error(f"--outer-image {args.outer_image!r}: not an image reference (name[:tag])")
        notes.append(f"--outer-image {args.outer_image}: the image of ROCK sandboxes (config/harbor.yaml "
                     "sandbox.image); local and Docker sandboxes need no outer controller container")
    if args.node_ip is not None:
        try:
            ipaddress.ip_address(args.node_ip)
        except ValueError:
            ap.error(f"--node-ip {args.node_ip!r}: not an IP address")
        notes.append(f"--node-ip {args.node_ip}: recorded in manifest.json; every service binds 127.0.0.1 "
                     "(docs/security.md)")
    if args.rollout_only:
        notes.append("--rollout-only: config/harbor.yaml run.rollout_only: true; sft/grpo/ppo/ppo-kl refuse to run")
    return notes


def task_backend(args, task_dir: Path, ap: argparse.ArgumentParser) -> list[str]:
    """A task whose repo lives in its Docker image (environment/Dockerfile or [environment].docker_image, the
    published Harbor layout) runs on the docker backend: without --sandbox-backend, configure writes it (admin.yaml
    admin.backend and worker.backend, harbor.yaml sandbox.backend) and says so; --sandbox-backend local is refused."""
    from services.tasks.task import TaskError, load_task  # noqa: PLC0415 - only with --task-id

    try:
        in_image = load_task(task_dir).in_image
    except TaskError as e:
        ap.error(f"--task-id {args.task_id}: {e}")
    if not in_image:
        return []
    if args.sandbox_backend == "local":
        ap.error(f"--task-id {args.task_id}: its repo lives in its Docker image ({task_dir}/environment): it runs on "
                 "the docker backend; use --sandbox-backend docker (or leave the flag out)")
    if args.sandbox_backend is None:
        args.sandbox_backend = "docker"
        return [f"--task-id {args.task_id}: its repo lives in its Docker image, so its sandboxes run on Docker: "
                "--sandbox-backend docker written (admin.yaml admin.backend + worker.backend, harbor.yaml "
                "sandbox.backend; needs `bash setup.sh docker`)"]
    return []


def find_task(task_id: str, root: Path) -> Path | None:
    """A built-in task (datasets/*/<id>) or <root>/assets/harbor-tasks/<id> (a task folder with task.toml)."""
    short = task_id.split("/")[-1]
    for d in [*sorted((ROOT / "datasets").glob(f"*/{short}")), root / "assets" / "harbor-tasks" / task_id]:
        if (d / "task.toml").exists():
            return d
    return None


def seed_record(args, vals: dict[str, str]) -> str:
    """config/manifest.json: what the seed's configure.py records (docs/seed-mapping.md)."""
    return json.dumps({
        "version": 1, "repo_root": str(ROOT), "task_root": str(task_root(args)),
        "roll_root": str(Path(args.roll_root).expanduser().resolve()) if args.roll_root else None,
        "node_ip": args.node_ip or "127.0.0.1",
        "ports": {"admin": args.admin_port, "backend": args.port, "worker": args.worker_port,
                  "modelservice": args.modelservice_port},
        "model": vals["model_name"], "model_path": vals["model_path"],
        "model_download": "local-dir" if Path(vals["model_path"]).is_absolute() else
                          ("embedded" if vals["model_name"] == TINY_NAME else "hf-cache"),
        "rollout_only": bool(args.rollout_only), "outer_image": args.outer_image, "task_id": args.task_id,
        "rock_base_url": args.rock_base_url, "rock_cluster": args.rock_cluster,
        "sandbox": {"flavor": vals["sandbox_flavor"], "base_url": vals["sandbox_base_url"],
                    "backend": vals["admin_backend"]},
    }, indent=1) + "\n"


def render(text: str, vals: dict[str, str], name: str) -> str:
    missing = sorted({m for m in PLACEHOLDER.findall(text) if m not in vals})
    if missing:
        sys.exit(f"configure.py: template {name} uses unknown placeholders {missing}")
    return PLACEHOLDER.sub(lambda m: vals[m.group(1)], text)


def build_parser() -> argparse.ArgumentParser:
    """The flags: the model and the backend, the sandbox manager, Ray, the seed's flags, and where to write."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("--model", default=None,
                    help="local HF model directory or HF id in the local cache (default: the tiny model)")
    ap.add_argument("--model-name", default=None, help="id to serve the model under (default: its HF id / dir name)")
    ap.add_argument("--tokenizer-id", default=None, help="tokenizer id/path clients load (default: the model's)")
    ap.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (default: auto-detect)")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                    help="weights dtype (default: float32 on CPU, bfloat16 on GPU)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads for the backend (default 1)")
    ap.add_argument("--microbatch-tokens", type=int, default=None, help="forward_backward micro-batch size in tokens")
    ap.add_argument("--kv-cache-gb", type=float, default=40.0, help="GPU: sampler KV-cache budget in GB (default 40)")
    ap.add_argument("--sampler-context", type=int, default=16384,
                    help="GPU: tokens per sampler slot (default 16384; longer requests use the HF sampler)")
    ap.add_argument("--sampler", default="auto", choices=["auto", "static", "hf", "vllm"],
                    help="sampling engine: auto (the static engine on GPUs, HF on CPU) | static | hf | vllm (any "
                         "architecture vLLM serves; install requirements/vllm.txt first)")
    ap.add_argument("--port", type=int, default=19210, help="backend port (default 19210)")
    ap.add_argument("--admin-port", type=int, default=18080, help="sandbox manager port (default 18080)")
    ap.add_argument("--api-key", default=None, help="backend API key (default: $TINKER_API_KEY or a random tml-… key)")
    ap.add_argument("--sandbox-key", default=None, help="sandbox manager key (default: random)")
    ap.add_argument("--sandbox-backend", default=None, choices=["local", "docker", "rock"],
                    help="where sandboxes run (default: docker when --task-id names a task whose repo lives in its "
                         "Docker image, the published Harbor layout; else local)")
    ap.add_argument("--rock-base-url", default=None,
                    help="use a real ROCK admin at this URL (implies --sandbox-backend rock)")
    ap.add_argument("--rock-cluster", default=None, help="ROCK cluster name")
    ap.add_argument("--rock-header", action="append", default=[], metavar="NAME=VALUE",
                    help="header sent with every ROCK call (its auth/routing: X-Key, X-User-Id, ...); repeatable")
    ap.add_argument("--ray-trainers", type=int, default=None,
                    help="run the runtime on Ray: data-parallel trainer ranks (default 1)")
    ap.add_argument("--ray-samplers", type=int, default=None,
                    help="run the runtime on Ray: sampler replicas (default 1)")
    ap.add_argument("--ray-address", default=None,
                    help="Ray cluster to join: auto (the one `ray start` runs here), host:port, or local (a private "
                         "one; default)")
    ap.add_argument("--rollout-only", action="store_true",
                    help="evaluation only: config/harbor.yaml run.rollout_only (training modes refuse to run)")
    add_seed_flags(ap)
    ap.add_argument("--out", default=None,
                    help="output directory (default: where the services read configs: $LTS_CONFIG_DIR, else "
                         "<task root>/config/ with --task-root or $TASK, else config/)")
    ap.add_argument("--force", action="store_true", help="overwrite configs even if you edited them")
    return ap


def add_seed_flags(ap: argparse.ArgumentParser) -> None:
    """The seed's flags (ROCK Tinker Quick Start): its task root and task, and what it records."""
    seed = ap.add_argument_group("the seed's flags (ROCK Tinker Quick Start; docs/seed-mapping.md)")
    seed.add_argument("--task-root", default=None, metavar="DIR",
                      help="the seed's task root: configs written to DIR/config/ (read there by run.sh/serve.sh "
                           "with TASK=DIR, runs in DIR/runs/), published tasks in DIR/assets/harbor-tasks/<ID> "
                           "(default: $TASK, else the repo root)")
    seed.add_argument("--task-id", default=None, metavar="ID",
                      help="the default task of run.sh modes (built-in id or one under --task-root); checked to exist")
    seed.add_argument("--roll-root", default=None, metavar="DIR",
                      help="a ROLL checkout: validated and recorded (the project's own runtime replaces it)")
    seed.add_argument("--outer-image", default=None, metavar="IMAGE",
                      help="the ROCK sandboxes' image (config/harbor.yaml sandbox.image)")
    seed.add_argument("--node-ip", default=None, metavar="IP",
                      help="the seed's node IP: validated and recorded; services still bind 127.0.0.1")
    seed.add_argument("--worker-port", type=int, default=22555,
                      help="`serve.sh worker` port (default 22555, the seed's host rocklet port)")
    seed.add_argument("--modelservice-port", type=int, default=28080,
                      help="ModelService TCP port recorded in manifest.json (default 28080; `serve.sh modelservice`)")


def render_configs(args, vals: dict[str, str]) -> dict[str, str]:
    """File name -> text: every template rendered with ``vals`` (the outer image substituted), and the seed's record."""
    rendered = {t.name: render(t.read_text(), vals, t.name) for t in sorted(TEMPLATES.glob("*.yaml"))}
    if args.outer_image:
        rendered["harbor.yaml"] = rendered["harbor.yaml"].replace("  image: lts/base:bookworm ",
                                                                  f"  image: {args.outer_image} ", 1)
    rendered[SEED_RECORD] = seed_record(args, vals)
    return rendered


def edited_configs(out: Path, names: list[str], manifest: dict[str, str]) -> list[str]:
    """The configs in ``out`` whose text is no longer what configure.py wrote (the manifest's sha256)."""
    return [name for name in names if (out / name).exists() and manifest.get(name) != sha256_file(out / name)]


def write_configs(out: Path, rendered: dict[str, str], manifest: dict[str, str]) -> None:
    """Write each config (mode 0600) and record its sha256 in the manifest."""
    for name, text in rendered.items():
        dest = out / name
        dest.write_text(text)
        os.chmod(dest, 0o600)
        manifest[name] = hashlib.sha256(text.encode()).hexdigest()
        print(f"wrote {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    bad = [h for h in args.rock_header if "=" not in h or not h.split("=", 1)[0].strip()]
    if bad:
        ap.error(f"--rock-header needs NAME=VALUE, got {bad}")

    notes = check_seed_flags(args, ap)
    out = Path(args.out) if args.out else config_dir(task_root(args))
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    vals = values(args, out)
    mt = (model_config(args.model) or {}).get("model_type")
    if vals["device"].startswith("cuda") and args.sampler == "auto" and mt not in (None, "qwen3"):
        print(f"configure.py: note: the static sampling engine runs Qwen3 dense models; this {mt} model will sample "
              "with the HF sampler (slow). --sampler vllm serves it fast (install requirements/vllm.txt first).",
              file=sys.stderr)
    man_path = out / MANIFEST
    manifest = json.loads(man_path.read_text()) if man_path.exists() else {}
    rendered = render_configs(args, vals)
    refused = [] if args.force else edited_configs(out, list(rendered), manifest)
    if refused:
        print(f"configure.py: refusing to overwrite edited config(s): {', '.join(refused)} in {out}\n"
              "  (keep your edits, or re-run with --force to regenerate them)", file=sys.stderr)
        return 3
    write_configs(out, rendered, manifest)
    shown = {k: (v if "key" not in k else v[:8] + "…") for k, v in vals.items()}
    print(json.dumps(shown, indent=1))
    for n in notes:
        print(f"note: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
