"""The runtime on Ray: trainer ranks and sampler replicas as Ray actors (``engine.ray`` in engine.yaml).

``RayRuntime`` implements the runtime interface (runtime_api.RuntimeAPI) like ``runtime.Runtime``; each
actor holds an ordinary ``Runtime`` and the driver (the backend process) only routes work:

* **Trainer ranks** (``trainers: N``) sit in one placement group and form a torch.distributed
  group (gloo on CPU, NCCL on CUDA). ``forward_backward`` splits a batch's datums over the ranks
  (balanced by tokens); Tinker's losses are sums over tokens, so the ranks' gradients add up to
  the one-process gradient: ``optim_step`` all-reduces them (one flat buffer) and steps a
  ``ZeroRedundancyOptimizer`` (AdamW with its state sharded across the ranks; the updated
  parameters are broadcast from their owners). Every rank keeps a full replica of the weights.
  (Not FSDP2 ``fully_shard``: the runtime adds peft adapters after wrapping time, which FSDP2 would
  neither shard nor reduce, and its logprob path calls the decoder and the unembedding outside the
  root module's forward, where FSDP2 gathers the root-level parameters; docs/ray.md.)
* **Sampler replicas** (``samplers: M``) serve ``sample``. Weights reach them from rank 0 through
  the Ray object store (one copy put, every replica pulls it; no disk) when sampler weights are
  created (``save_weights_for_sampler``), and lazily when a (restarted) replica lacks them.
  Requests are routed by rendezvous hashing of (weights, prompt): repeats of one prompt under one
  sampling session always reach the same replica (its shared-prefix batching computes the prompt
  once), different prompts spread over the replicas. A replica that dies is restarted by Ray
  (``max_restarts=-1``) and its requests fail over to the live replicas meanwhile.

Checkpoints are written by rank 0 and read by every actor from ``checkpoint_dir``: on a cluster
of several nodes that directory must be shared storage (same path everywhere).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
import torch
import torch.distributed as dist
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.optim import ZeroRedundancyOptimizer

from services.models.loading import load_model

from .codec import FwdBwdRequest
from .errors import NotFound, ServerFault, TinkerError
from .models import SamplerWeights
from .runtime import Runtime
from .runtime_api import ModelInfo, Poll, RuntimeAPI, TrainConfig
from .sampler import SampleResult, SampleSpec

log = logging.getLogger("backend.ray")

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class BaseStub:
    """What the API layer reads of a base model (``Runtime.bases[name]``) without loading it here."""

    name: str
    path: str
    info: ModelInfo


# ---------------------------------------------------------------------- actors
class TrainerRank:
    """One data-parallel rank: an ordinary Runtime plus the cross-rank gradient reduction."""

    def __init__(self, rank: int, world: int, models: list[dict[str, Any]], checkpoint_dir: str, rt_kwargs: dict):
        self.rank, self.world = rank, world
        self.rt = Runtime(models, Path(checkpoint_dir), **rt_kwargs)

    def rendezvous(self) -> tuple[str, int]:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]

        return ray.util.get_node_ip_address(), port

    def init_group(self, host: str, port: int) -> None:
        backend = "nccl" if self.rt.device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=self.rank, world_size=self.world)

    def bases(self) -> dict[str, tuple[str, ModelInfo]]:
        return {n: (b.path, b.info) for n, b in self.rt.bases.items()}

    def pid(self) -> int:
        return os.getpid()

    def create_model(self, model_id: str, cfg: TrainConfig) -> None:
        fresh = model_id not in self.rt.trainables
        tm = self.rt.create_model(model_id, cfg)
        if fresh and self.world > 1:
            g = tm.optimizer.param_groups[0]
            tm.optimizer = ZeroRedundancyOptimizer(tm.params, optimizer_class=torch.optim.AdamW, lr=g["lr"],
                                                   betas=g["betas"], eps=g["eps"], weight_decay=g["weight_decay"],
                                                   **({"fused": True} if g.get("fused") else {}))

    def unload_model(self, model_id: str) -> None:
        self.rt.unload_model(model_id)

    def has_model(self, model_id: str) -> bool:
        return model_id in self.rt.trainables

    def forward_backward(self, req: FwdBwdRequest):
        return self.rt.forward_backward(req)

    def optim_step(self, model_id: str, adam: dict[str, float]) -> dict[str, float]:
        tm = self.rt.trainable(model_id)
        if self.world > 1:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in tm.params]
            flat = _flatten_dense_tensors(grads)
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            for p, g in zip(tm.params, _unflatten_dense_tensors(flat, grads)):
                p.grad = g
        return self.rt.optim_step(model_id, adam)

    def save(self, model_id: str, name: str, kind: str, with_optimizer: bool, overwrite: bool,
             user_metadata: dict | None) -> str | None:
        tm = self.rt.trainable(model_id)
        if with_optimizer and self.world > 1:
            tm.optimizer.consolidate_state_dict(to=0)  # collective: every rank sends its optimizer shard
        if self.rank != 0:
            return None
        return str(self.rt.save(model_id, name, kind, with_optimizer, overwrite, user_metadata))

    def load_into(self, model_id: str, path: str, with_optimizer: bool) -> None:
        self.rt.load_into(model_id, Path(path), with_optimizer)

    def export_weights(self, model_id: str) -> tuple[dict, dict]:
        """(train config, CPU state dict) of a model's current weights, for the sampler replicas."""
        tm = self.rt.trainable(model_id)
        if tm.adapter:
            state = self.rt.base(tm.config.base_model).adapter_state(tm.adapter)
        else:
            assert tm.module is not None  # full fine-tuning
            state = tm.module.state_dict()
        return tm.config.to_json(), {k: v.detach().cpu().contiguous() for k, v in state.items()}

    def grads(self, model_id: str) -> dict[int, Any]:
        """Current gradients by parameter index (tests compare ranks with one process)."""
        return {i: p.grad.detach().cpu().clone() for i, p in enumerate(self.rt.trainable(model_id).params)
                if p.grad is not None}

    def weights(self, model_id: str) -> list[Any]:
        return [p.detach().cpu().clone() for p in self.rt.trainable(model_id).params]


class SamplerReplica:
    """One sampling replica: an ordinary Runtime without training models. ``spill_dir`` is its own
    (its runtime spills evicted snapshots there); checkpoints are read by absolute path."""

    def __init__(self, models: list[dict[str, Any]], spill_dir: str, rt_kwargs: dict):
        self.rt = Runtime(models, Path(spill_dir), **rt_kwargs)

    def release(self, keys: list[str]) -> None:
        self.rt.release([], keys)

    def pid(self) -> int:
        return os.getpid()

    def install(self, key: str, source: tuple) -> None:
        """Load sampler weights: ("state", [ref to (train config, state dict)]) or ("ckpt", path)."""
        if source[0] == "ckpt":
            self.rt.sampler_from_checkpoint(key, Path(source[1]))
            return

        cfg_json, state = ray.get(source[1][0])
        cfg = TrainConfig(**cfg_json)
        base = self.rt.base(cfg.base_model)
        if cfg.is_lora:
            adapter = self.rt.new_adapter_name("s")
            base.add_lora(adapter, cfg)
            base.load_adapter_state(adapter, state)
            for p in base.adapter_params(adapter):
                p.requires_grad_(False)
            sw = SamplerWeights(key, base.name, adapter=adapter, config=cfg)
        else:
            mod = load_model(base.path, self.rt.dtype, base.device)
            mod.load_state_dict(state, strict=False)
            for p in mod.parameters():
                p.requires_grad_(False)
            sw = SamplerWeights(key, base.name, module=mod, config=cfg)
        self.rt._register_sampler(sw)

    def sample(self, base_model: str, key: str | None, source: tuple | None,
               specs: list[SampleSpec]) -> list[SampleResult]:
        if key is not None and not self.rt.has_sampler(key):
            assert source is not None  # the driver sends the source with every key
            self.install(key, source)  # evicted here, or this replica was restarted
        return self.rt.sample(base_model, key, specs)


# ---------------------------------------------------------------------- driver
def _unwrap(e: BaseException) -> BaseException:
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, TinkerError) else e


def actor_totals(n_train: int, t_res: dict, n_samp: int, s_res: dict) -> tuple[float, float]:
    """(CPUs, GPUs) the trainer ranks and sampler replicas ask for together."""
    return (n_train * float(t_res.get("CPU", 1)) + n_samp * float(s_res.get("CPU", 1)),
            n_train * float(t_res.get("GPU", 0)) + n_samp * float(s_res.get("GPU", 0)))


class RayRuntime(RuntimeAPI):
    """The runtime interface over Ray actors (see the module docstring). Runs on the scheduler thread."""

    def __init__(self, models: list[dict[str, Any]], checkpoint_dir: Path, ray_cfg: dict[str, Any], **rt_kwargs):
        self.ray = ray
        self.checkpoint_dir = Path(checkpoint_dir)
        self.device = rt_kwargs.get("device", "cpu")
        self.max_sampler_snapshots = int(rt_kwargs.get("max_sampler_snapshots", 16))
        n_train, n_samp = int(ray_cfg.get("trainers", 1)), int(ray_cfg.get("samplers", 1))
        if n_train < 1 or n_samp < 1:
            raise ValueError("engine.ray needs trainers >= 1 and samplers >= 1")
        gpu = self.device.startswith("cuda")
        res = ray_cfg.get("resources") or {}
        t_res = dict(res.get("trainer") or ({"CPU": 1, "GPU": 1} if gpu else {"CPU": 1}))
        s_res = dict(res.get("sampler") or ({"CPU": 1, "GPU": 1} if gpu else {"CPU": 1}))
        address = ray_cfg.get("address") or "local"  # local: a private cluster inside this backend
        self._own_cluster = address == "local"
        if gpu:  # each actor sees its own GPU(s) as cuda:0
            rt_kwargs = dict(rt_kwargs, device="cuda")
        env = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
        for k in ("HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            if os.environ.get(k):
                env[k] = os.environ[k]
        init: dict[str, Any] = dict(address=address, include_dashboard=False, log_to_driver=False,
                                    runtime_env={"env_vars": env}, ignore_reinit_error=True)
        need_cpu, need_gpu = actor_totals(n_train, t_res, n_samp, s_res)
        if self._own_cluster:
            # a private cluster's CPUs are logical scheduling tokens: size them so the actors fit (2 trainers +
            # 2 samplers on a 2-core machine share its cores), unless engine.ray.num_cpus says otherwise
            init["num_cpus"] = int(ray_cfg.get("num_cpus") or max(os.cpu_count() or 1, need_cpu))
        t0 = time.time()
        self._start_cluster(init)
        have = ray.cluster_resources()
        if have.get("CPU", 0) < need_cpu or have.get("GPU", 0) < need_gpu:
            self._stop.set()    # leave no private cluster behind (a joined one is only disconnected)
            self._owner.join(60)
            raise RuntimeError(
                f"engine.ray: the actors need {need_cpu:g} CPU and {need_gpu:g} GPU ({n_train} trainer(s) x {t_res} + "
                f"{n_samp} sampler(s) x {s_res}), the {'private' if self._own_cluster else 'joined'} cluster has "
                f"{have.get('CPU', 0):g} CPU and {have.get('GPU', 0):g} GPU: lower --ray-trainers/--ray-samplers, "
                "set engine.ray.resources, or (a private cluster) raise engine.ray.num_cpus")
        log.info("ray %s: %s cluster at %s, resources %s", ray.__version__,
                 "private" if self._own_cluster else "joined",
                 ray.get_runtime_context().gcs_address, ray.cluster_resources())

        def opts(r: dict) -> dict:
            r = dict(r)
            return {"num_cpus": r.pop("CPU", 1), "num_gpus": r.pop("GPU", 0), **({"resources": r} if r else {})}

        wait = float(ray_cfg.get("start_timeout_s", 600))
        need = f"{n_train} trainer(s) x {t_res} + {n_samp} sampler(s) x {s_res}"
        self._pg = placement_group([t_res] * n_train, strategy=str(ray_cfg.get("strategy", "PACK")))
        try:
            ray.get(self._pg.ready(), timeout=wait)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"engine.ray: the trainer placement group was not placed in {wait:.0f}s: it needs "
                               f"{need}; the cluster has {ray.cluster_resources()}") from None
        Trainer = ray.remote(TrainerRank)
        self.trainers = [Trainer.options(**opts(t_res), scheduling_strategy=PlacementGroupSchedulingStrategy(
            self._pg, placement_group_bundle_index=i)).remote(i, n_train, models, str(self.checkpoint_dir), rt_kwargs)
            for i in range(n_train)]
        Replica = ray.remote(SamplerReplica).options(**opts(s_res), max_restarts=-1)
        self.samplers = [Replica.remote(models, str(self.checkpoint_dir / ".ray-replicas" / str(i)), rt_kwargs)
                         for i in range(n_samp)]
        try:
            host, port = self._get(self.trainers[0].rendezvous.remote(), timeout=wait)
            self._get([t.init_group.remote(host, port) for t in self.trainers], timeout=wait)
            self._get([s.pid.remote() for s in self.samplers], timeout=wait)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"engine.ray: actors not started in {wait:.0f}s: they need {need}; the cluster has "
                               f"{ray.cluster_resources()}") from None
        self.bases = {n: BaseStub(n, p, info) for n, (p, info) in self._get(self.trainers[0].bases.remote()).items()}
        self.trainables: dict[str, TrainConfig] = {}
        self._snapshots: OrderedDict[str, tuple] = OrderedDict()   # key -> source (see SamplerReplica.install)
        self._down: dict[int, Any] = {}                            # replica -> pending ping while it restarts
        self.served = [0] * n_samp                                 # sequences sampled per replica
        log.info("ray runtime ready in %.1fs: %d trainer rank(s) %s, %d sampler replica(s) %s", time.time() - t0,
                 n_train, t_res, n_samp, s_res)

    # ------------------------------------------------------------------ helpers
    def _start_cluster(self, init: dict[str, Any]) -> None:
        """ray.init on a thread of its own that lives until ``close``: Ray starts its node processes
        with a parent-death signal, which Linux sends when the *thread* that started them ends."""
        started, self._stop = threading.Event(), threading.Event()
        box: dict[str, BaseException] = {}

        def own() -> None:
            try:
                self.ray.init(**init)
            except BaseException as e:  # noqa: BLE001
                box["error"] = e
                return
            finally:
                started.set()
            self._stop.wait()
            self.ray.shutdown()

        self._owner = threading.Thread(target=own, name="ray-driver", daemon=True)
        self._owner.start()
        started.wait()
        if "error" in box:
            raise box["error"]

    def _get(self, refs, timeout: float | None = None):
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.RayTaskError as e:
            raise _unwrap(e) from None

    def _all(self, method: str, *args) -> list[Any]:
        return self._get([getattr(t, method).remote(*args) for t in self.trainers])

    def trainable(self, model_id: str) -> TrainConfig:
        if model_id not in self.trainables:
            raise NotFound(f"training model {model_id!r} is not loaded (unknown id, or the backend restarted: "
                           "create a new training client from a saved checkpoint)")
        return self.trainables[model_id]

    # ------------------------------------------------------------------ training
    def create_model(self, model_id: str, cfg: TrainConfig) -> TrainConfig:
        self.base(cfg.base_model)
        self._all("create_model", model_id, cfg)
        self.trainables[model_id] = cfg
        return cfg

    def unload_model(self, model_id: str) -> None:
        if self.trainables.pop(model_id, None) is not None:
            self._all("unload_model", model_id)

    def forward_backward(self, req: FwdBwdRequest, between: Callable[[], None] | None = None):
        """The ranks' micro-batches run in their actors: ``between`` is not called (samples wait for the
        ranks, as every job does on this runtime)."""
        self.trainable(req.model_id)
        shards = _shard(req.data, len(self.trainers))
        calls = [(idx, t.forward_backward.remote(replace(req, data=[req.data[i] for i in idx])))
                 for t, idx in zip(self.trainers, shards) if idx]
        outs = self._get([ref for _, ref in calls])
        results: list[Any] = [None] * len(req.data)
        metrics: dict[str, float] = {}
        weights = [m.get("num_tokens:sum", 0.0) for _, m in outs]
        for (idx, _), (res, _) in zip(calls, outs):
            for i, r in zip(idx, res):
                results[i] = r
        for k in {k for _, m in outs for k in m}:
            vals = [(m[k], w) for (_, m), w in zip(outs, weights) if k in m]
            if k.endswith(":sum"):
                metrics[k] = float(sum(v for v, _ in vals))
            elif k.endswith(":max"):
                metrics[k] = float(max(v for v, _ in vals))
            else:  # ":mean" (per token) and anything else: token-weighted mean
                metrics[k] = float(sum(v * w for v, w in vals) / max(sum(w for _, w in vals), 1.0))
        return results, metrics

    def optim_step(self, model_id: str, adam: dict[str, float]) -> dict[str, float]:
        self.trainable(model_id)
        return self._all("optim_step", model_id, adam)[0]

    def save(self, model_id: str, name: str, kind: str, with_optimizer: bool, overwrite: bool,
             user_metadata: dict | None = None) -> Path:
        self.trainable(model_id)
        dest = Path(self._all("save", model_id, name, kind, with_optimizer, overwrite, user_metadata)[0])
        if kind == "sampler_weights":  # sampling clients created from this path find the weights loaded
            self._broadcast(f"ckpt:{dest}", model_id)
        return dest

    def load_into(self, model_id: str, path: Path, with_optimizer: bool) -> None:
        self.trainable(model_id)
        self._all("load_into", model_id, str(path), with_optimizer)

    # ------------------------------------------------------------------ sampler weights
    def _register(self, key: str, source: tuple) -> None:
        refs = [(i, s.install.remote(key, source)) for i, s in enumerate(self.samplers) if i not in self._down]
        for i, ref in refs:
            try:
                self._get(ref)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorUnavailableError):
                self._mark_down(i)  # it installs the weights lazily once restarted
        self._snapshots[key] = source
        self._snapshots.move_to_end(key)
        while len(self._snapshots) > self.max_sampler_snapshots:
            self._snapshots.popitem(last=False)  # drops the object store copy; replicas evict on their own (LRU)

    def _broadcast(self, key: str, model_id: str) -> None:
        self._register(key, ("state", [self.trainers[0].export_weights.remote(model_id)]))

    def snapshot_for_sampler(self, model_id: str, key: str) -> str:
        self.trainable(model_id)
        self._broadcast(key, model_id)
        return key

    def sampler_from_checkpoint(self, key: str, path: Path) -> str:
        self._register(key, ("ckpt", str(path)))
        return key

    def has_sampler(self, key: str) -> bool:
        return key in self._snapshots

    def release(self, model_ids: list[str], sampler_keys: list[str]) -> None:
        """A finished or expired session's models and snapshots leave the actors (see Runtime.release)."""
        for key in sampler_keys:
            self._snapshots.pop(key, None)
        live = self._live()
        if sampler_keys and live:
            self._get([self.samplers[i].release.remote(sampler_keys) for i in live])
        for mid in model_ids:
            self.unload_model(mid)

    # ------------------------------------------------------------------ sampling
    def _mark_down(self, i: int) -> None:
        log.warning("sampler replica %d died; Ray restarts it, its requests go to the other replicas", i)
        self._down[i] = self.samplers[i].pid.remote()

    def _live(self) -> list[int]:
        for i, ping in list(self._down.items()):
            ready, _ = self.ray.wait([ping], timeout=0)
            if ready:
                try:
                    self.ray.get(ping)
                    del self._down[i]
                    log.info("sampler replica %d is back", i)
                except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorUnavailableError):
                    self._down[i] = self.samplers[i].pid.remote()
        return [i for i in range(len(self.samplers)) if i not in self._down]

    def route(self, weights_key: str | None, spec: SampleSpec, live: list[int]) -> int:
        """Rendezvous hashing of (weights, prompt) over the live replicas: stable while they live,
        and a dead replica's share moves to the others without reshuffling the rest."""
        key = f"{weights_key}|{','.join(map(str, spec.prompt))}".encode()
        return max(live, key=lambda i: hashlib.blake2b(key + b"#%d" % i, digest_size=8).digest())

    def sample(self, base_model: str, weights_key: str | None, specs: list[SampleSpec],
               poll: Poll | None = None) -> list[SampleResult]:
        self.base(base_model)
        source = None
        if weights_key is not None:
            source = self._snapshots.get(weights_key)
            if source is None:
                raise NotFound(f"sampler weights {weights_key!r} are no longer loaded")
            self._snapshots.move_to_end(weights_key)
        results: list[SampleResult | None] = [None] * len(specs)
        todo = list(range(len(specs)))
        for _attempt in range(len(self.samplers) + 2):
            live = self._live()
            if not live:  # every replica is restarting: wait for the first one back
                ready, _ = self.ray.wait(list(self._down.values()), num_returns=1, timeout=300)
                live = self._live()
                if not live:
                    raise ServerFault("no sampler replica is alive")
            groups: dict[int, list[int]] = {}
            for j in todo:
                groups.setdefault(self.route(weights_key, specs[j], live), []).append(j)
            calls = {i: self.samplers[i].sample.remote(base_model, weights_key, source, [specs[j] for j in idx])
                     for i, idx in groups.items()}
            todo = []
            for i, ref in calls.items():
                try:
                    for j, r in zip(groups[i], self._get(ref)):
                        results[j] = r
                    self.served[i] += sum(specs[j].num_samples for j in groups[i])
                except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorUnavailableError):
                    self._mark_down(i)
                    todo += groups[i]
            if not todo:
                return results  # type: ignore[return-value]
        raise ServerFault("sampling failed: sampler replicas kept dying")

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the actors; a private cluster is shut down with them (no raylet is left behind)."""

        for a in self.trainers + self.samplers:
            self.ray.kill(a, no_restart=True)
        remove_placement_group(self._pg)
        self._stop.set()
        self._owner.join(60)


def _shard(data: list, n: int) -> list[list[int]]:
    """Datum indices per rank: longest first onto the rank with the fewest tokens, each rank's
    indices kept in request order."""
    load = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(data)), key=lambda i: -len(data[i].tokens)):
        r = min(range(n), key=lambda r: (load[r], r))
        out[r].append(i)
        load[r] += len(data[i].tokens)
    return [sorted(x) for x in out]
