"""Waiting sample requests run before waiting training jobs in a scheduler round, and a sample
request that arrives during a forward_backward is answered between its micro-batches.

Runs in the runtime venv (python tests/backend/scheduler_order_check.py DB_PATH), on a runtime that records
its calls: a forward_backward and a sample request are both waiting when the worker starts; the sample must
be answered first, so the rollout that waits on it goes on (tools, sandboxes, grading) while the trainer
trains (--max-steps-off-policy K >= 1). With training first, that rollout waited for the whole update.
Then a forward_backward of two micro-batches runs, and a sample request is submitted while its first
runs: the sample must be answered before the second (a multi-turn rollout's next turn waits for one
micro-batch, not for the update). Last, a burst of sample requests arriving over more than one batch window
is sampled as one batch in content order (a same-seed run samples the same batches on a loaded machine)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from services.backend.sampler import SampleResult, SampleSpec
from services.backend.scheduler import ForwardBackwardJob, SampleJob, Scheduler
from services.backend.store import Store


class RecordingRuntime:
    def pauses_sampling(self) -> bool:
        return True

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.in_first_microbatch = threading.Event()
        self.sample_submitted = threading.Event()
        self.batches: list[list[int | None]] = []

    def forward_backward(self, req, between=None):
        if req is None:
            self.calls.append("forward_backward")
            return [], {"loss:sum": 0.0}
        self.calls.append("microbatch 1")
        self.in_first_microbatch.set()
        assert self.sample_submitted.wait(30)
        if between is not None:
            between()
        self.calls.append("microbatch 2")
        return [], {"loss:sum": 0.0}

    def sample(self, base, weights_key, specs, poll=None):
        self.calls.append("sample")
        self.batches.append([sp.seed for sp in specs])
        return [SampleResult(sequences=[([7], [-0.5], "length")]) for _ in specs]


def main() -> int:
    rt = RecordingRuntime()
    done = threading.Event()
    answered: list[str] = []

    def on_done(rid: str) -> None:
        answered.append(rid)
        if len(answered) == 2:
            done.set()

    sched = Scheduler(lambda: rt, Store(Path(sys.argv[1])), on_done)  # type: ignore[arg-type, return-value]
    sched.submit(ForwardBackwardJob(request_id="1", model_id="m", seq_id=1, req=None))  # type: ignore[arg-type]
    sched.submit(SampleJob(request_id="2", key=("tiny", None), spec=SampleSpec(prompt=[1, 2], max_tokens=1)))
    sched.start()
    assert done.wait(30), (rt.calls, answered)
    sched.stop()
    assert rt.calls == ["sample", "forward_backward"], rt.calls
    assert answered == ["2", "1"], answered

    # a sample request that arrives during a forward_backward: answered between its micro-batches
    rt.calls.clear()
    answered.clear()
    done.clear()
    sched = Scheduler(lambda: rt, Store(Path(sys.argv[1] + ".2")), on_done)  # type: ignore[arg-type, return-value]
    sched.start()
    sched.submit(ForwardBackwardJob(request_id="3", model_id="m", seq_id=1, req=object()))  # type: ignore[arg-type]
    assert rt.in_first_microbatch.wait(30)
    sched.submit(SampleJob(request_id="4", key=("tiny", None), spec=SampleSpec(prompt=[1, 2], max_tokens=1)))
    rt.sample_submitted.set()
    assert done.wait(30), (rt.calls, answered)
    sched.stop()
    assert rt.calls == ["microbatch 1", "sample", "microbatch 2"], rt.calls
    assert answered == ["4", "3"], answered

    # a burst that arrives over more than one batch window (a loaded machine: an RL step's groups 8 ms apart, the
    # window 20 ms) is one batch, its rows in content order (the seeds here), not in arrival order. Planted: one
    # window, as before (time.sleep(batch_window_s)) -> the burst is split -> fails.
    rt.calls.clear()
    rt.batches.clear()
    answered.clear()
    sched = Scheduler(lambda: rt, Store(Path(sys.argv[1] + ".3")), answered.append,  # type: ignore[arg-type]
                      batch_window_s=0.02, batch_window_max_s=1.0)
    sched.start()
    for i, seed in enumerate([3, 1, 6, 4, 2, 5]):
        sched.submit(SampleJob(request_id=str(10 + i), key=("tiny", None),
                               spec=SampleSpec(prompt=[1, 2], max_tokens=1, seed=seed)))
        time.sleep(0.008)
    deadline = time.time() + 30
    while len(answered) < 6 and time.time() < deadline:
        time.sleep(0.01)
    sched.stop()
    assert rt.batches == [[1, 2, 3, 4, 5, 6]], (rt.batches, answered)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
