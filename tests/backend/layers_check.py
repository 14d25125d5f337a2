"""One GRPO-style forward_backward through the SDK crosses each backend layer boundary once.

Runs in the runtime venv (python tests/backend/layers_check.py MODEL_DIR STATE_DIR): builds the backend
in this process (services.backend.__main__.build), serves it on a thread, and profiles every Python
call on every thread while the SDK's forward_backward (importance_sampling, nonzero advantages) runs.
A call is an entry into a layer when the nearest layer frame above it (store, tenants, errors and
__main__ are transparent) belongs to another layer; the API layer's calls count only inside the
forward_backward route (the SDK's retrieve_future polls are other requests). Prints the entries per
(caller layer -> callee layer) and "OK" when they are exactly: api -> wire 1 (decode + validate),
wire -> api 1 (its ``info_of`` callback: the model's facts, 404 if it is not loaded), api ->
scheduler 1 (submit), scheduler -> runtime 1 (Runtime.forward_backward), scheduler -> wire 1
(encode the result), scheduler -> api 1 (the completion callback that wakes the long-poll), one
HTTP request, and nothing else (no call from the API into the runtime, none up from the runtime).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import tinker
import uvicorn
from tinker import types

from services.backend.__main__ import build

BACKEND = Path(__file__).resolve().parents[2] / "services" / "backend"
LAYERS = {  # file (relative to services/backend) -> layer
    "app.py": "api", "routes.py": "api", "external_routes.py": "api", "state.py": "api", "lifecycle.py": "api",
    "wire.py": "wire", "codec.py": "wire",
    "scheduler.py": "scheduler",
    **{f: "runtime" for f in ("runtime_api.py", "runtime.py", "models.py", "logprobs.py", "losses.py", "sampler.py",
                              "checkpoint_io.py", "snapshots.py", "ray_runtime.py", "unembed.py", "residual.py")},
}
INFRA = {"store.py", "tenants.py", "errors.py", "__main__.py", "paths.py", "checkpoints.py"}
EXPECTED = {("api", "wire"): 1, ("wire", "api"): 1, ("api", "scheduler"): 1, ("scheduler", "runtime"): 1,
            ("scheduler", "wire"): 1, ("scheduler", "api"): 1}
# a coroutine's resumption is reported as a call too: the API's route coroutines are counted by HTTP
CO_COROUTINE = 0x80


def layer_of(filename: str) -> str | None:
    p = Path(filename)
    if BACKEND not in p.parents:
        return None
    rel = p.relative_to(BACKEND)
    if rel.as_posix() in INFRA:
        return None
    return "runtime" if rel.parts[0] in ("gpu", "engines") else LAYERS.get(rel.as_posix(), "other")


class Recorder:
    def __init__(self) -> None:
        self.on = False
        self.crossings: Counter[tuple[str, str]] = Counter()
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def profile(self, frame, event, _arg):
        if not self.on or event != "call" or frame.f_code.co_flags & CO_COROUTINE:
            return
        callee = layer_of(frame.f_code.co_filename)
        if callee is None:
            return
        up = frame.f_back
        while up is not None and layer_of(up.f_code.co_filename) is None:
            up = up.f_back
        if up is None:
            return  # entered from outside the backend (uvicorn, FastAPI, thread start)
        caller = layer_of(up.f_code.co_filename)
        if caller == "api" and not in_forward_backward_route(up):
            return
        if caller != callee:
            with self.lock:
                self.crossings[(caller, callee)] += 1
                self.calls.append(f"{caller} -> {callee}: {frame.f_code.co_qualname} "
                                  f"({Path(frame.f_code.co_filename).name})")


def in_forward_backward_route(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "forward_backward" and Path(frame.f_code.co_filename).name == "routes.py":
            return True
        frame = frame.f_back
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def datum(ids: list[int], advantage: float) -> types.Datum:
    n = len(ids) - 1
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={
        "target_tokens": types.TensorData.from_numpy(np.array(ids[1:], dtype=np.int64)),
        "logprobs": types.TensorData.from_numpy(np.full(n, -2.0, dtype=np.float32)),
        "advantages": types.TensorData.from_numpy(np.full(n, advantage, dtype=np.float32))})


def main() -> int:
    model_dir, state_dir = Path(sys.argv[1]), Path(sys.argv[2])
    port, key = free_port(), "tml-layers-check"
    cfg = {"backend": {"api_keys": [key]},
           "runtime": {"device": "cpu", "dtype": "float32", "threads": 1,
                       "models": [{"name": "tiny", "path": str(model_dir)}]}}
    rec = Recorder()
    threading.setprofile(rec.profile)  # the scheduler and server threads start below
    sys.setprofile(rec.profile)
    state, app = build(cfg, state_dir)
    state.scheduler.start()
    state.scheduler.ready.wait()
    requests: Counter[str] = Counter()

    @app.middleware("http")
    async def count(request, call_next):
        if rec.on:
            requests[request.url.path] += 1
        return await call_next(request)

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    try:
        tc = tinker.ServiceClient(base_url=f"http://127.0.0.1:{port}", api_key=key).create_lora_training_client(
            base_model="tiny", rank=4)
        group = [datum([5, 6, 7, 8, 9, 10], 1.0), datum([5, 6, 7, 8, 11, 12], -1.0)]  # a GRPO group of two
        before = [o["logprobs"].to_numpy() for o in tc.forward(group, "importance_sampling").result(60).loss_fn_outputs]
        rec.on = True
        out = tc.forward_backward(group, "importance_sampling").result(60)
        rec.on = False
        tc.optim_step(types.AdamParams(learning_rate=1e-2)).result(60)
        after = [o["logprobs"].to_numpy() for o in tc.forward(group, "importance_sampling").result(60).loss_fn_outputs]
    finally:
        rec.on = False
        sys.setprofile(None)
        threading.setprofile(None)
        server.should_exit = True
        state.scheduler.stop()
        state.store.close()
    print("HTTP requests:", dict(requests))
    for c in rec.calls:
        print(" ", c)
    print("crossings:", dict(rec.crossings))
    fwd = requests.get("/api/v1/forward_backward", 0)
    assert fwd == 1, f"forward_backward HTTP requests: {fwd}"
    assert dict(rec.crossings) == EXPECTED, f"layer crossings {dict(rec.crossings)} != {EXPECTED}"
    assert out.metrics["loss:sum"] != 0.0, out.metrics
    moved = max(float(np.abs(a - b).max()) for a, b in zip(after, before))
    assert moved > 1e-4, f"the optim step after it did not move the logprobs ({moved})"
    print(f"logprobs moved by {moved:.4f} after the step")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
