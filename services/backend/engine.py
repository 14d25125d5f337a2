"""The engine: one worker thread that owns the torch runtime and executes queued jobs.

* Training jobs of one model run strictly in ``seq_id`` order (a missing seq id is waited
  for at most ``gap_timeout_s``, since a client-side failure can leave a gap).
* Sampling jobs that share weights are batched into one ``Runtime.sample`` call, so
  hundreds of concurrent one-sample requests (the cookbook's pattern) decode together.
* Training and sampling alternate, so neither starves the other.
Results go to the store; ``on_done(request_id)`` wakes the API's long-polls.
"""

from __future__ import annotations

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


class Engine:
    def __init__(self, runtime_factory: Callable[[], Runtime], store: Store, on_done: Callable[[str], None],
                 gap_timeout_s: float = 1.0, batch_window_s: float = 0.002):
        self.store = store
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
        if self._general or self._samples:
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
            mine = [j for j in self._samples if j.sample_key == key]
            if not mine:
                return []
            self._samples = [j for j in self._samples if j.sample_key != key]

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
        with self._cv:
            if not self._samples:
                return
        if self.batch_window_s:
            time.sleep(self.batch_window_s)  # let a burst of concurrent requests land in one batch
        with self._cv:
            jobs, self._samples = self._samples, []
        groups: dict[tuple[str, str | None], list[Job]] = defaultdict(list)
        for j in jobs:
            groups[j.sample_key].append(j)
        for (base, wkey), group in groups.items():
            t0 = time.time()
            try:
                results = self.runtime.sample(base, wkey, [j.sample_spec for j in group],
                                              poll=lambda key=(base, wkey): self._poll_samples(key))
                outs = [(j, j.finish_sample(r), None) for j, r in zip(group, results)]
            except TinkerError as e:
                outs = [(j, None, (e.message, e.category)) for j in group]
            except Exception as e:  # noqa: BLE001
                log.error("sampling batch failed:\n%s", traceback.format_exc())
                outs = [(j, None, (f"internal error while sampling: {type(e).__name__}: {e}", "server")) for j in group]
            dt = time.time() - t0
            self.busy_s += dt
            log.debug("sampling round: %d requests, %d sequences, %.3fs", len(group),
                      sum(j.sample_spec.num_samples for j in group), dt)
            for j, res, err in outs:
                if err is None:
                    self.store.complete(j.request_id, *res)
                else:
                    self.store.fail(j.request_id, *err)
                self.on_done(j.request_id)
