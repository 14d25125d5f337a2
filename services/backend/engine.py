"""The engine: one worker thread that owns the torch runtime and executes queued jobs.

* Training jobs of one model run strictly in ``seq_id`` order (a missing seq id is waited
  for at most ``gap_timeout_s``, since a client-side failure can leave a gap).
* Sampling jobs that share weights are batched into one ``Runtime.sample`` call, so
  hundreds of concurrent one-sample requests (the cookbook's pattern) decode together.
* Training and sampling alternate, so neither starves the other.
* Fairness: a sample request larger than ``sample_round_tokens`` (num_samples x max_tokens) is
  answered in chunks of sequences, one chunk per round, and every round first serves the small
  requests that arrived meanwhile. On the local (non-static) sampler a running chunk also yields
  when a small request arrives: its unfinished rows are resumed (prompt + their tokens, their
  seeded streams) in a later round. A 2-token request waits for a few decode steps, not for a
  1024 x 512-token request to finish.
Results go to the store; ``on_done(request_id)`` wakes the API's long-polls.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import TinkerError
from .runtime import Runtime
from .store import Store

log = logging.getLogger("backend.engine")

Result = tuple[str, bytes]  # (content type, body)


@dataclass
class Job:
    request_id: str
    kind: str
    run: Callable[[Runtime], Result] | None = None  # training-type jobs
    model_id: str | None = None
    seq_id: int | None = None
    # sampling jobs
    sample_key: tuple[str, str | None] | None = None  # (base_model, weights key)
    sample_spec: Any = None
    finish_sample: Callable[[Any], Result] | None = None
    submitted: float = field(default_factory=time.time)


@dataclass
class _Chunked:
    """A large sample job answered in chunks of its sequences (one chunk per sampling round)."""
    job: Job
    chunks: list[Any]                           # SampleSpecs still to run (chunks, resumed rows)
    slots: list[Any] = field(default_factory=list)   # the request's sequences, by row index
    head: Any = None                            # the first chunk's SampleResult (prompt logprobs)


class Engine:
    def __init__(self, runtime_factory: Callable[[], Runtime], store: Store, on_done: Callable[[str], None],
                 gap_timeout_s: float = 1.0, batch_window_s: float = 0.002, sample_round_tokens: int = 16384):
        self.store = store
        self.sample_round_tokens = sample_round_tokens   # num_samples x max_tokens above this is chunked
        self.on_done = on_done
        self.gap_timeout_s = gap_timeout_s
        self.batch_window_s = batch_window_s
        self._factory = runtime_factory
        self.runtime: Runtime | None = None
        self._cv = threading.Condition()
        self._general: list[Job] = []                         # jobs without a model order
        self._train: dict[str, dict[int, Job]] = defaultdict(dict)
        self._last_seq: dict[str, int] = {}
        self._samples: list[Job] = []
        self._chunked: list[_Chunked] = []
        self._stop = False
        self.ready = threading.Event()
        self.startup_error: str | None = None
        self._thread = threading.Thread(target=self._main, name="engine", daemon=True)
        self.busy_s = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        with self._cv:
            if job.sample_key is not None:
                self._samples.append(job)
            elif job.model_id is not None and job.seq_id is not None:
                self._train[job.model_id][job.seq_id] = job
            else:
                self._general.append(job)
            self._cv.notify()

    def call(self, fn: Callable[[Runtime], Any], timeout: float = 60.0) -> Any:
        """Run ``fn(runtime)`` on the engine thread and wait for its value (for quick
        synchronous operations such as creating sampler weights)."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def run(rt: Runtime) -> Result:
            try:
                box["value"] = fn(rt)
            except BaseException as e:  # noqa: BLE001
                box["error"] = e
            done.set()
            return ("", b"")

        with self._cv:
            self._general.insert(0, Job(request_id="", kind="call", run=run))
            self._cv.notify()
        if not done.wait(timeout):
            raise TimeoutError("engine busy")
        if "error" in box:
            raise box["error"]
        return box.get("value")

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
            for job in general + train:
                self._execute(job)
            self._run_sampling_round()

    def _has_work(self) -> bool:
        if self._general or self._samples or self._chunked:
            return True
        now = time.time()
        for mid, q in self._train.items():
            if q and (min(q) <= self._last_seq.get(mid, 0) + 1 or now - min(j.submitted for j in q.values()) > self.gap_timeout_s):
                return True
        return False

    def _wait_time(self) -> float:
        return 0.1 if any(self._train.values()) else 1.0

    def _pop_ready_training(self) -> list[Job]:
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
        try:
            ctype, body = job.run(self.runtime)
            if job.request_id:
                self.store.complete(job.request_id, ctype, body)
        except TinkerError as e:
            if job.request_id:
                self.store.fail(job.request_id, e.message, e.category)
        except Exception as e:  # noqa: BLE001
            log.error("job %s (%s) failed:\n%s", job.request_id, job.kind, traceback.format_exc())
            if job.request_id:
                self.store.fail(job.request_id, f"internal error in {job.kind}: {type(e).__name__}: {e}", "server")
        finally:
            self.busy_s += time.time() - t0
            log.debug("%s job %.3fs", job.kind, time.time() - t0)
        if job.request_id:
            self.on_done(job.request_id)

    def _poll_samples(self, key: tuple[str, str | None]) -> list[tuple[Any, Callable[[Any], None]]]:
        """Continuous batching: sample jobs for the same weights that arrived while a decode loop
        runs join it (engines that support it call this between decode steps)."""
        with self._cv:
            mine = [j for j in self._samples if j.sample_key == key and not self._is_large(j.sample_spec)]
            if not mine:
                return []
            self._samples = [j for j in self._samples if j not in mine]

        def callback(job: Job) -> Callable[[Any], None]:
            def done(result: Any) -> None:
                try:
                    self.store.complete(job.request_id, *job.finish_sample(result))
                except Exception as e:  # noqa: BLE001
                    self.store.fail(job.request_id, f"internal error while sampling: {type(e).__name__}: {e}", "server")
                self.on_done(job.request_id)
            return done

        return [(j.sample_spec, callback(j)) for j in mine]

    def _run_sampling_round(self) -> None:
        """One round: every small request waiting now (batched per weights), then one chunk of
        each large request (see ``_Chunked``)."""
        with self._cv:
            if not self._samples and not self._chunked:
                return
        if self.batch_window_s:
            time.sleep(self.batch_window_s)  # let a burst of concurrent requests land in one batch
        with self._cv:
            jobs, self._samples = self._samples, []
        small = [j for j in jobs if not self._is_large(j.sample_spec)]
        self._chunked += [_Chunked(j, self._split(j.sample_spec), [None] * j.sample_spec.num_samples)
                          for j in jobs if self._is_large(j.sample_spec)]
        groups: dict[tuple[str, str | None], list[Job]] = defaultdict(list)
        for j in small:
            groups[j.sample_key].append(j)
        for key, group in groups.items():
            for j, res, err in self._sample_batch(key, [j.sample_spec for j in group], group):
                self._answer(j, res, err)
        self._run_chunks()

    def _run_chunks(self) -> None:
        by_key: dict[tuple[str, str | None], list[_Chunked]] = defaultdict(list)
        for c in self._chunked:
            by_key[c.job.sample_key].append(c)
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
                        c.chunks.insert(0, self._resume(c.job.sample_spec, spec.row_offset + k, seq, res.resume.get(k)))
                    else:
                        c.slots[spec.row_offset + k] = seq
            for c in cs:
                if id(c) in failed or c.chunks:
                    continue
                self._chunked.remove(c)
                try:
                    merged = dataclasses.replace(c.head, sequences=c.slots, resume={})
                    self._answer(c.job, c.job.finish_sample(merged), None)
                except Exception as e:  # noqa: BLE001
                    self._answer(c.job, None, (f"internal error while sampling: {type(e).__name__}: {e}", "server"))

    def _take(self, c: _Chunked) -> list[Any]:
        """This round's specs of ``c``: its next chunk, or as many resumed rows as one chunk holds."""
        per = max(1, self.sample_round_tokens // c.job.sample_spec.max_tokens)
        out = [c.chunks.pop(0)]
        rows = out[0].num_samples
        while c.chunks and out[0].prefix is not None and c.chunks[0].prefix is not None and rows < per:
            out.append(c.chunks.pop(0))
            rows += 1
        return out

    def _sample_batch(self, key: tuple[str, str | None], specs: list[Any], owners: list, finish: bool = True):
        """``runtime.sample`` for ``specs``; (owner, result, error) per spec, the result already
        finished (encoded) when ``finish``."""
        base, wkey = key
        t0 = time.time()
        try:
            results = self.runtime.sample(base, wkey, specs, poll=lambda: self._poll_samples(key))
            outs = [(o, o.finish_sample(r) if finish else r, None) for o, r in zip(owners, results)]
        except TinkerError as e:
            outs = [(o, None, (e.message, e.category)) for o in owners]
        except Exception as e:  # noqa: BLE001
            log.error("sampling batch failed:\n%s", traceback.format_exc())
            outs = [(o, None, (f"internal error while sampling: {type(e).__name__}: {e}", "server")) for o in owners]
        dt = time.time() - t0
        self.busy_s += dt
        log.debug("sampling round: %d requests, %d sequences, %.3fs", len(specs), sum(s.num_samples for s in specs), dt)
        return outs

    def _answer(self, job: Job, res: Result | None, err: tuple[str, str] | None) -> None:
        if err is None:
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
                                   topk_prompt_logprobs=0, prompt_logprobs_last_n=None, should_yield=self._yield_check())

    def _yield_check(self):
        """``should_yield`` for chunks: a small request is waiting (local sampler only; the static
        engine batches continuously instead)."""
        if not isinstance(self.runtime, Runtime) or self.runtime.static is not None:
            return None

        def small_waiting() -> bool:
            with self._cv:
                return any(not self._is_large(j.sample_spec) for j in self._samples)
        return small_waiting
