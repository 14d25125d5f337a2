"""Issue 22: `--log-to tensorboard|wandb` writes the metrics.jsonl keys to TensorBoard event files and an
offline W&B run, read back here from the files themselves (TFRecord events; W&B's record log)."""

from __future__ import annotations

import os
import struct
import subprocess

from tensorboardX.proto import event_pb2
from wandb.proto import wandb_internal_pb2 as pb

from cookbook.metric_loggers import MetricLoggers

LINES = [{"step": s, "mean_reward": 0.25 * s, "loss_per_token": 1.0 / (s + 1), "gate_reached": s == 2, "mode": "sft"}
         for s in range(3)]
NUMERIC = {k for k, v in LINES[0].items() if not isinstance(v, str)}


def _tb_scalars(logdir):
    out: dict[tuple[str, int], float] = {}
    for f in logdir.iterdir():
        data = f.read_bytes()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            ev = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            for v in ev.summary.value:
                out[(v.tag, ev.step)] = v.simple_value
    return out


def _wandb_history(path):
    """W&B's .wandb file: a 7-byte header, then LevelDB-log records (crc32, u16 length, type) in 32 KiB blocks."""
    data, pos, buf, rows = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        n, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):  # full or last fragment
            rec = pb.Record.FromString(buf)
            buf = b""
            if rec.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): i.value_json for i in rec.history.item})
    return rows


def test_tensorboard_and_wandb_offline_get_the_metrics_keys(tmp_path):
    run_dir = tmp_path / "sft-20261201-000000"
    run_dir.mkdir()
    m = MetricLoggers(run_dir, ["tensorboard", "wandb"], {"lr": 1e-4})
    for line in LINES:
        m.log(line, line["step"])
    m.close()

    tb = _tb_scalars(run_dir / "tensorboard")
    assert {k for k, _ in tb} == NUMERIC
    assert tb[("mean_reward", 2)] == 0.5 and tb[("gate_reached", 2)] == 1.0

    runs = list((run_dir / "wandb").glob("offline-run-*/*.wandb"))
    assert len(runs) == 1, runs
    hist = _wandb_history(runs[0])
    assert len(hist) == 3
    assert NUMERIC <= set(hist[2]) and float(hist[2]["mean_reward"]) == 0.5
    left = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "cmd="], capture_output=True, text=True).stdout
    assert "wandb-core" not in left, f"the W&B service outlived close(): {left}"
