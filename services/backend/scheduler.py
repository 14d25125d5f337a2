"""The scheduler: one worker thread that owns the runtime and executes typed jobs, one job type
per request kind and one ``process_<kind>`` handler per type (``engine:`` in engine.yaml configures
the runtime it drives).

* Training jobs of one model run strictly in ``seq_id`` order (a missing seq id is waited
  for at most ``gap_timeout_s``, since a client-side failure can leave a gap).
* Sampling jobs that share weights are batched into one ``runtime.sample`` call, so
  hundreds of concurrent one-sample requests (the cookbook's pattern) decode together.
* Training and sampling alternate, so neither starves the other; a round answers the waiting
  samples before it runs the waiting training jobs, so an off-policy client's rollouts go on
  (tools, sandboxes, grading) while the trainer trains; and a forward_backward answers the small
  samples that arrive meanwhile between its micro-batches, so a multi-turn rollout's next turn
  waits for one micro-batch, not for the whole update.
* Fairness: a sample request larger than ``sample_round_tokens`` (num_samples x max_tokens) is
  answered in chunks of sequences, one chunk per round, and every round first serves the small
  requests that arrived meanwhile. On the local (non-static) sampler a running chunk also yields
  when a small request arrives: its unfinished rows are resumed (prompt + their tokens, their
  seeded streams) in a later round. A 2-token request waits for a few decode steps, not for a
  1024 x 512-token request to finish.
Results go to the store, encoded by wire.py; ``on_done(request_id)`` wakes the API's long-polls.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import checkpoints, export, wire
from .codec import FwdBwdRequest
from .errors import TinkerError
from .runtime_api import RuntimeAPI, TrainConfig
from .sampler import SampleResult, SampleSpec
from .store import Store
from .wire import Result

log = logging.getLogger("backend.scheduler")

SampleKey = tuple[str, str | None]  # (base model, sampler weights key; None = the base model)


# ---------------------------------------------------------------------- jobs
@dataclass
class Job:
    request_id: str
    submitted: float = field(default_factory=time.time, init=False)


@dataclass
class ModelJob(Job):
    """A job on one training model; with a ``seq_id`` it runs in that model's seq_id order."""

    model_id: str
    seq_id: int | None


@dataclass
class CreateModelJob(ModelJob):
    config: TrainConfig


@dataclass
class UnloadModelJob(ModelJob):
    pass


@dataclass
class ForwardBackwardJob(ModelJob):
    req: FwdBwdRequest


@dataclass
class OptimStepJob(ModelJob):
    adam: dict[str, float]


@dataclass
class SaveWeightsJob(ModelJob):
    save: wire.SaveWeights


@dataclass
class SaveForSamplerJob(ModelJob):
    save: wire.SaveForSampler
    session_id: str               # of the training model (a snapshot's sampling session joins it)
    base_model: str


@dataclass
class LoadWeightsJob(ModelJob):
    path: str                     # tinker:// path, echoed in the result
    directory: Path
    with_optimizer: bool
    create: TrainConfig | None    # create the model first (load_weights into a new training client)


@dataclass
class SaveExternalJob(ModelJob):
    save: wire.SaveExternal
    directory: Path
    base_model: str


@dataclass
class SampleJob(Job):
    key: SampleKey
    spec: SampleSpec


@dataclass
class CallJob(Job):
    """A quick synchronous call on the worker thread (``Scheduler.call``); no future."""

    fn: Callable[[], None]


@dataclass
class _Chunked:
    """A large sample job answered in chunks of its sequences (one chunk per sampling round)."""
    job: SampleJob
    chunks: list[SampleSpec]                    # specs still to run (chunks, resumed rows)
    slots: list[Any] = field(default_factory=list)   # the request's sequences, by row index
    head: SampleResult | None = None            # the first chunk's result (prompt logprobs)


def _content_order(job: SampleJob) -> tuple:
    sp = job.spec
    return (sp.seed is None, sp.seed or 0, len(sp.prompt), sp.prompt, sp.num_samples, sp.max_tokens,
            sp.temperature, sp.top_k, sp.top_p)


class Scheduler:
    runtime: RuntimeAPI  # made by the worker thread before ``ready`` is set (``startup_error`` if that failed)

    def __init__(self, runtime_factory: Callable[[], RuntimeAPI], store: Store, on_done: Callable[[str], None],
                 gap_timeout_s: float = 1.0, batch_window_s: float = 0.002, sample_round_tokens: int = 16384,
                 batch_window_max_s: float = 0.05):
        self.store = store
        self.sample_round_tokens = sample_round_tokens   # num_samples x max_tokens above this is chunked
        self.on_done = on_done
        self.gap_timeout_s = gap_timeout_s
        self.batch_window_s = batch_window_s
        self.batch_window_max_s = batch_window_max_s   # a burst that keeps arriving is waited for up to this long
        self._factory = runtime_factory
        self._cv = threading.Condition()
        self._general: list[Job] = []                         # jobs without a model order
        self._train: dict[str, dict[int, ModelJob]] = defaultdict(dict)
        self._last_seq: dict[str, int] = {}
        self._samples: list[SampleJob] = []
        self._chunked: list[_Chunked] = []
        self._stop = False
        self.ready = threading.Event()
        self.startup_error: str | None = None
        self._thread = threading.Thread(target=self._main, name="scheduler", daemon=True)
        self._handlers: dict[type, Callable[[Any], Result]] = {
            CreateModelJob: self.process_create_model, UnloadModelJob: self.process_unload_model,
            ForwardBackwardJob: self.process_forward_backward, OptimStepJob: self.process_optim_step,
            SaveWeightsJob: self.process_save_weights, SaveForSamplerJob: self.process_save_for_sampler,
            LoadWeightsJob: self.process_load_weights, SaveExternalJob: self.process_save_external,
            CallJob: self.process_call}

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        with self._cv:
            if isinstance(job, SampleJob):
                self._samples.append(job)
            elif isinstance(job, ModelJob) and job.seq_id is not None:
                self._train[job.model_id][job.seq_id] = job
            else:
                self._general.append(job)
            self._cv.notify()

    def call(self, fn: Callable[[RuntimeAPI], Any], timeout: float = 60.0) -> Any:
        """Run ``fn(runtime)`` on the worker thread and wait for its value (for quick
        synchronous operations such as creating sampler weights)."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = fn(self.runtime)
            except BaseException as e:  # noqa: BLE001
                box["error"] = e
            done.set()

        with self._cv:
            self._general.insert(0, CallJob(request_id="", fn=run))
            self._cv.notify()
        if not done.wait(timeout):
            raise TimeoutError("scheduler busy")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    # ------------------------------------------------------------------ handlers (worker thread)
    def process_create_model(self, job: CreateModelJob) -> Result:
        self.runtime.create_model(job.model_id, job.config)
        return wire.json_result({"model_id": job.model_id, "type": "create_model"})

    def process_unload_model(self, job: UnloadModelJob) -> Result:
        self.runtime.unload_model(job.model_id)
        return wire.json_result({"model_id": job.model_id, "type": "unload_model"})

    def process_forward_backward(self, job: ForwardBackwardJob) -> Result:
        outs, metrics = self.runtime.forward_backward(job.req, between=self._samples_between_microbatches)
        return wire.forward_backward_result(outs, metrics)

    def process_optim_step(self, job: OptimStepJob) -> Result:
        return wire.json_result({"metrics": self.runtime.optim_step(job.model_id, job.adam), "type": "optim_step"})

    def process_save_weights(self, job: SaveWeightsJob) -> Result:
        s = job.save
        checkpoints.set_expiry(self.runtime.save(job.model_id, s.name, "weights", True, s.overwrite, s.user_metadata),
                               s.ttl)
        return wire.json_result({"path": checkpoints.uri(job.model_id, "weights", s.name), "type": "save_weights"})

    def process_save_for_sampler(self, job: SaveForSamplerJob) -> Result:
        s = job.save
        res: dict[str, Any] = {"type": "save_weights_for_sampler"}
        if s.name is not None:
            d = self.runtime.save(job.model_id, s.name, "sampler_weights", False, True, s.user_metadata)
            checkpoints.set_expiry(d, s.ttl)
            res["path"] = checkpoints.uri(job.model_id, "sampler_weights", s.name)
        if s.sampling_session_seq_id is not None:
            sampler_id = f"{job.session_id}:sample:{s.sampling_session_seq_id}"
            key = f"snap:{sampler_id}:{job.request_id}"
            self.runtime.snapshot_for_sampler(job.model_id, key)
            self.store.add_sampler(sampler_id, job.session_id, job.base_model, None, key)
            res["sampling_session_id"] = sampler_id
        return wire.json_result(res)

    def process_load_weights(self, job: LoadWeightsJob) -> Result:
        if job.create is not None:
            self.runtime.create_model(job.model_id, job.create)
        self.runtime.load_into(job.model_id, job.directory, job.with_optimizer)
        return wire.json_result({"path": job.path, "model_id": job.model_id, "type": "load_weights"})

    def process_save_external(self, job: SaveExternalJob) -> Result:
        """The model's current weights as a Hugging Face directory (``files/``, age-encrypted if asked)."""
        s, dest = job.save, job.directory
        src = self.runtime.save(job.model_id, f".src-{s.name}-{time.time_ns()}", "external_weights", False, True)
        try:
            meta = checkpoints.read_meta(src)
            if dest.exists():
                shutil.rmtree(dest)
            info = export.export_checkpoint(src, dest / "files", self.runtime.base(job.base_model).path,
                                            adapter=meta["train_config"]["rank"] > 0,
                                            source=f"{checkpoints.SCHEME}{job.model_id}")
            if s.recipients:
                export.encrypt_tree(dest / "files", s.recipients)
        finally:
            shutil.rmtree(src, ignore_errors=True)
        meta.update(name=s.name, kind="external_weights", format=info["format"],
                    expires_at=time.time() + s.ttl if s.ttl else None, user_metadata={})
        checkpoints.write_meta(dest, meta)
        size = sum(f.stat().st_size for f in (dest / "files").rglob("*") if f.is_file())
        return wire.json_result({"path": checkpoints.uri(job.model_id, "external_weights", s.name),
                                 "size_bytes": size, "type": "save_weights_external"})

    def process_call(self, job: CallJob) -> Result:
        job.fn()
        return "", b""

    def _finish_sample(self, res: SampleResult) -> Result:
        return wire.sample_result(res.sequences, res.prompt_logprobs, res.topk_prompt, res.cache_hit_tokens)

    # ------------------------------------------------------------------ worker
    def _main(self) -> None:
        try:
            self.runtime = self._factory()
        except Exception as e:  # noqa: BLE001
            self.startup_error = f"{type(e).__name__}: {e}"
            log.exception("runtime failed to start")
            self.ready.set()
            return
        self.ready.set()
        while True:
            with self._cv:
                while not self._stop and not self._has_work():
                    self._cv.wait(timeout=self._wait_time())
                if self._stop:
                    return
                general = self._general[:]
                self._general.clear()
                train = self._pop_ready_training()
            for job in general:
                self._execute(job)
            # Waiting samples first: their rollouts go on (tools, sandboxes, grading) while the trainer trains.
            self._run_sampling_round()
            for job in train:
                self._execute(job)

    def _has_work(self) -> bool:
        if self._general or self._samples or self._chunked:
            return True
        now = time.time()
        for mid, q in self._train.items():
            if q and (min(q) <= self._last_seq.get(mid, 0) + 1
                      or now - min(j.submitted for j in q.values()) > self.gap_timeout_s):
                return True
        return False

    def _wait_time(self) -> float:
        return 0.1 if any(self._train.values()) else 1.0

    def _pop_ready_training(self) -> list[ModelJob]:
        out = []
        now = time.time()
        for mid, q in self._train.items():
            if not q:
                continue
            s = min(q)
            expected = self._last_seq.get(mid, 0) + 1
            if s <= expected or now - q[s].submitted > self.gap_timeout_s:
                if s > expected:
                    log.warning("model %s: seq_id %d missing; continuing with %d", mid, expected, s)
                out.append(q.pop(s))
                self._last_seq[mid] = s
        return out

    def _execute(self, job: Job) -> None:
        t0 = time.time()
        kind = type(job).__name__
        try:
            ctype, body = self._handlers[type(job)](job)
            if job.request_id:
                self.store.complete(job.request_id, ctype, body)
        except TinkerError as e:
            if job.request_id:
                self.store.fail(job.request_id, e.message, e.category)
        except Exception as e:  # noqa: BLE001
            log.error("job %s (%s) failed:\n%s", job.request_id, kind, traceback.format_exc())
            if job.request_id:
                self.store.fail(job.request_id, f"internal error in {kind}: {type(e).__name__}: {e}", "server")
        finally:
            log.debug("%s %.3fs", kind, time.time() - t0)
        if job.request_id:
            self.on_done(job.request_id)

    def _poll_samples(self, key: SampleKey) -> list[tuple[Any, Callable[[Any], None]]]:
        """Continuous batching: sample jobs for the same weights that arrived while a decode loop
        runs join it (engines that support it call this between decode steps)."""
        with self._cv:
            mine = [j for j in self._samples if j.key == key and not self._is_large(j.spec)]
            if not mine:
                return []
            self._samples = [j for j in self._samples if j not in mine]

        def callback(job: SampleJob) -> Callable[[Any], None]:
            def done(result: Any) -> None:
                try:
                    self.store.complete(job.request_id, *self._finish_sample(result))
                except Exception as e:  # noqa: BLE001
                    self.store.fail(job.request_id, f"internal error while sampling: {type(e).__name__}: {e}", "server")
                self.on_done(job.request_id)
            return done

        return [(j.spec, callback(j)) for j in mine]

    def _samples_between_microbatches(self) -> None:
        """Between two micro-batches of a forward_backward: the small sample requests waiting now
        (a multi-turn rollout's next turn need not wait for the whole update; large ones wait for
        the next round)."""
        with self._cv:
            small = [j for j in self._samples if not self._is_large(j.spec)]
            if small:
                self._samples = [j for j in self._samples if self._is_large(j.spec)]
        self._answer_small(small)

    def _run_sampling_round(self) -> None:
        """One round: every small request waiting now (batched per weights), then one chunk of
        each large request (see ``_Chunked``)."""
        with self._cv:
            if not self._samples and not self._chunked:
                return
        if self.batch_window_s:
            self._linger()
        with self._cv:
            jobs, self._samples = self._samples, []
        self._chunked += [_Chunked(j, self._split(j.spec), [None] * j.spec.num_samples)
                          for j in jobs if self._is_large(j.spec)]
        self._answer_small([j for j in jobs if not self._is_large(j.spec)])
        self._run_chunks()

    def _linger(self) -> None:
        """Let a burst of concurrent requests land in one batch: wait ``batch_window_s`` windows until one passes
        with no new request, at most ``batch_window_max_s``. On a loaded machine a client's burst (an RL step's
        groups) arrives over more than one window; a batch that splits it changes the numerics of the rows sampled
        (CPU GEMMs round rows in a tail block differently), so a same-seed run would no longer repeat itself."""
        deadline = time.monotonic() + max(self.batch_window_max_s, self.batch_window_s)
        seen = -1
        while time.monotonic() < deadline:
            with self._cv:
                n = len(self._samples)
            if n == seen:
                return
            seen = n
            time.sleep(self.batch_window_s)

    def _answer_small(self, jobs: list[SampleJob]) -> None:
        """Sample small requests, one batch per sampler weights, and answer each. A batch's rows are in an order
        of their content (seed, prompt, sizes), not of arrival: the same requests give the same batch, and so the
        same numerics, whichever thread's request came first."""
        groups: dict[SampleKey, list[SampleJob]] = defaultdict(list)
        for j in sorted(jobs, key=_content_order):
            groups[j.key].append(j)
        for key, group in groups.items():
            log.debug("sampling batch: %d requests, %d sequences", len(group), sum(j.spec.num_samples for j in group))
            for j, res, err in self._sample_batch(key, [j.spec for j in group], group):
                self._answer(j, res, err)

    def _run_chunks(self) -> None:
        by_key: dict[SampleKey, list[_Chunked]] = defaultdict(list)
        for c in self._chunked:
            by_key[c.job.key].append(c)
        for key, cs in by_key.items():
            specs, owners = [], []
            for c in cs:
                taken = self._take(c)
                specs += taken
                owners += [c] * len(taken)
            failed = set()
            for spec, (c, res, err) in zip(specs, self._sample_batch(key, specs, owners, finish=False)):
                if err is not None:
                    if id(c) not in failed:
                        failed.add(id(c))
                        self._chunked.remove(c)
                        self._answer(c.job, None, err)
                    continue
                if spec.row_offset == 0 and spec.prefix is None:
                    c.head = res
                for k, seq in enumerate(res.sequences):
                    if seq[2] == "preempted":
                        c.chunks.insert(0, self._resume(c.job.spec, spec.row_offset + k, seq, res.resume.get(k)))
                    else:
                        c.slots[spec.row_offset + k] = seq
            for c in cs:
                if id(c) in failed or c.chunks:
                    continue
                self._chunked.remove(c)
                try:
                    assert c.head is not None, "a chunked request's first chunk always runs first"
                    merged = dataclasses.replace(c.head, sequences=c.slots, resume={})
                    self._answer(c.job, self._finish_sample(merged), None)
                except Exception as e:  # noqa: BLE001
                    self._answer(c.job, None, (f"internal error while sampling: {type(e).__name__}: {e}", "server"))

    def _take(self, c: _Chunked) -> list[Any]:
        """This round's specs of ``c``: its next chunk, or as many resumed rows as one chunk holds."""
        per = max(1, self.sample_round_tokens // c.job.spec.max_tokens)
        out = [c.chunks.pop(0)]
        rows = out[0].num_samples
        while c.chunks and out[0].prefix is not None and c.chunks[0].prefix is not None and rows < per:
            out.append(c.chunks.pop(0))
            rows += 1
        return out

    def _sample_batch(self, key: SampleKey, specs: list[Any], owners: list, finish: bool = True
                      ) -> list[tuple[Any, Any, tuple[str, str] | None]]:
        """``runtime.sample`` for ``specs``; (owner, result, error) per spec, the result already
        finished (encoded) when ``finish``."""
        base, wkey = key
        t0 = time.time()
        outs: list[tuple[Any, Any, tuple[str, str] | None]]
        try:
            results = self.runtime.sample(base, wkey, specs, poll=lambda: self._poll_samples(key))
            outs = [(o, self._finish_sample(r) if finish else r, None) for o, r in zip(owners, results)]
        except TinkerError as e:
            outs = [(o, None, (e.message, e.category)) for o in owners]
        except Exception as e:  # noqa: BLE001
            log.error("sampling batch failed:\n%s", traceback.format_exc())
            outs = [(o, None, (f"internal error while sampling: {type(e).__name__}: {e}", "server")) for o in owners]
        dt = time.time() - t0
        log.debug("sampling round: %d requests, %d sequences, %.3fs", len(specs), sum(s.num_samples for s in specs), dt)
        return outs

    def _answer(self, job: SampleJob, res: Result | None, err: tuple[str, str] | None) -> None:
        if err is None:
            assert res is not None
            self.store.complete(job.request_id, *res)
        else:
            self.store.fail(job.request_id, *err)
        self.on_done(job.request_id)

    def _is_large(self, spec: Any) -> bool:
        return spec.num_samples > 1 and spec.num_samples * spec.max_tokens > self.sample_round_tokens

    def _split(self, spec: Any) -> list[Any]:
        """Chunks of at most ``sample_round_tokens`` (num_samples x max_tokens); prompt logprobs
        are computed by the first chunk only; ``row_offset`` keeps seeded rows identical."""
        per = max(1, self.sample_round_tokens // spec.max_tokens)
        out = []
        for start in range(0, spec.num_samples, per):
            first = start == 0
            out.append(dataclasses.replace(spec, num_samples=min(per, spec.num_samples - start), row_offset=start,
                                           prompt_logprobs=spec.prompt_logprobs and first,
                                           topk_prompt_logprobs=spec.topk_prompt_logprobs if first else 0,
                                           should_yield=self._yield_check()))
        return out

    def _resume(self, spec: Any, row: int, seq: tuple, gen: Any) -> Any:
        """A preempted row of ``spec`` as a spec of its own: the prompt plus the row's tokens."""
        tokens, lps, _ = seq
        return dataclasses.replace(spec, prompt=list(spec.prompt) + list(tokens), num_samples=1, row_offset=row,
                                   prefix=(list(tokens), list(lps)), resume_gen=gen, prompt_logprobs=False,
                                   topk_prompt_logprobs=0, prompt_logprobs_last_n=None,
                                   should_yield=self._yield_check())

    def _yield_check(self):
        """``should_yield`` for chunks: a small request is waiting (local sampler only; the static
        engine batches continuously instead)."""
        if not self.runtime.pauses_sampling():
            return None

        def small_waiting() -> bool:
            with self._cv:
                return any(not self._is_large(j.spec) for j in self._samples)
        return small_waiting
