"""Base-model sampling after a session's last LoRA adapter left memory samples the base model.

Runs in the runtime venv (python tests/backend/release_check.py MODEL_DIR SPILL_DIR): peft keeps the
deleted adapter as its active one, and its disable_adapter() then failed with KeyError (every
base-model sample request answered 'internal error while sampling')."""

from __future__ import annotations

import sys
from pathlib import Path

from services.backend.runtime import Runtime, TrainConfig
from services.backend.sampler import SampleSpec


def main() -> int:
    rt = Runtime([{"name": "tiny", "path": sys.argv[1]}], Path(sys.argv[2]), threads=1)
    spec = SampleSpec(prompt=[1, 2, 3], num_samples=1, max_tokens=6, temperature=0.0, top_k=-1, top_p=1.0,
                      seed=None, stop_token_ids=set(), stop_strings=[])
    before = rt.sample("tiny", None, [spec])[0].sequences
    rt.create_model("m", TrainConfig("tiny", rank=4, seed=0))
    rt.snapshot_for_sampler("m", "snap:s")
    rt.release(["m"], ["snap:s"])  # the session ended: its adapters are deleted
    after = rt.sample("tiny", None, [spec])[0].sequences
    assert after == before, (before, after)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
