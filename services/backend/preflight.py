"""What the backend checks about its own configuration before the slow start (engine.ray, devices),
so an infeasible set-up fails in seconds with the exact numbers and the fix (services/common/preflight.py
holds the generic checks: state-dir lock, port)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from services.common.preflight import Refused


def check_resources(rcfg: dict[str, Any]) -> None:
    """engine.ray on a private cluster asking for more GPUs than this machine has: Refused. (CPUs of a
    private cluster are sized to fit the actors by ray_runtime; a joined cluster is checked on joining.)"""
    ray_cfg = rcfg.get("ray")
    device = str(rcfg.get("device", "cpu"))
    if not ray_cfg or not device.startswith("cuda") or (ray_cfg.get("address") or "local") != "local":
        return
    n_train, n_samp = int(ray_cfg.get("trainers", 1)), int(ray_cfg.get("samplers", 1))
    res = ray_cfg.get("resources") or {}
    need = (n_train * float((res.get("trainer") or {}).get("GPU", 1))
            + n_samp * float((res.get("sampler") or {}).get("GPU", 1)))
    have = visible_gpus()
    if need > have:
        raise Refused(f"engine.ray: {n_train} trainer(s) + {n_samp} sampler replica(s) need {need:g} GPU(s), this "
                      f"machine has {have}: configure.py --ray-trainers/--ray-samplers with fewer, or set "
                      "engine.ray.resources to share GPUs (e.g. {GPU: 0.5})")


def visible_gpus() -> int:
    """NVIDIA GPUs this process may use, without importing torch (seconds on a busy machine):
    the driver's /proc entries, narrowed by CUDA_VISIBLE_DEVICES."""
    d = Path("/proc/driver/nvidia/gpus")
    n = len(list(d.iterdir())) if d.is_dir() else 0
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        n = min(n, len([x for x in vis.split(",") if x.strip() and x.strip() != "-1"]))
    return n
