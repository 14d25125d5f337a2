"""Acceptance (issue 2): the official tinker-cookbook's RL loop (rl.train.main) and supervised
loop (supervised.train.main) run >= 3 steps with checkpoints against our backend, unchanged."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import chz
from tinker_cookbook import renderers
from tinker_cookbook.rl import train as rl_train
from tinker_cookbook.rl.problem_env import ProblemEnv, ProblemGroupBuilder
from tinker_cookbook.rl.types import RLDataset, RLDatasetBuilder
from tinker_cookbook.supervised import train as sl_train
from tinker_cookbook.supervised.data import FromConversationFileBuilder
from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig
from tinker_cookbook.tokenizer_utils import get_tokenizer

RENDERER = "role_colon"


def _rl_config(backend, log_path: Path):
    class EchoEnv(ProblemEnv):
        """Toy task: reward when the answer contains the letter 'a' (random policy gets a mix)."""

        def __init__(self, renderer, i: int):
            super().__init__(renderer)
            self.i = i

        def get_question(self) -> str:
            return f"Say a word ({self.i})."

        def check_answer(self, sample_str: str) -> bool:
            return "a" in sample_str

        def check_format(self, sample_str: str) -> bool:
            return True

        def get_reference_answer(self) -> str:
            return "a"

    class Dataset(RLDataset):
        def __init__(self, renderer):
            self.renderer = renderer

        def get_batch(self, index: int):
            return [ProblemGroupBuilder(env_thunk=lambda i=index * 2 + j: EchoEnv(self.renderer, i), num_envs=4)
                    for j in range(2)]

        def __len__(self) -> int:
            return 100

    @chz.chz
    class Builder(RLDatasetBuilder):
        model_name: str

        async def __call__(self):
            renderer = renderers.get_renderer(RENDERER, get_tokenizer(self.model_name))
            return Dataset(renderer), None

    return rl_train.Config(learning_rate=1e-3, dataset_builder=Builder(model_name=backend.model),
                           model_name=backend.model,
                        recipe_name="test_rl", max_tokens=8, log_path=str(log_path), eval_every=0, save_every=2,
                        renderer_name=RENDERER, lora_rank=8, max_steps=3, base_url=backend.url,
                        loss_fn="importance_sampling", num_groups_to_log=0)


def test_cookbook_rl_train_main_runs_three_steps_with_checkpoints(backend, tmp_path):
    cfg = _rl_config(backend, tmp_path / "rl")
    asyncio.run(rl_train.main(cfg))
    ckpts = [json.loads(l) for l in (tmp_path / "rl" / "checkpoints.jsonl").read_text().splitlines() if l.strip()]
    assert ckpts, "the cookbook wrote no checkpoint records"
    assert any("state_path" in c and c["state_path"].startswith("tinker://") for c in ckpts), ckpts
    metrics = [json.loads(l) for l in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines() if l.strip()]
    assert len(metrics) >= 3, f"expected >= 3 logged RL steps, got {len(metrics)}"


def test_cookbook_supervised_train_main_runs_three_steps(backend, tmp_path):
    data = tmp_path / "convs.jsonl"
    with open(data, "w") as f:
        for i in range(12):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus one?"},
                                             {"role": "assistant", "content": f"It is {i + 1}."}]}) + "\n")
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=backend.model, renderer_name=RENDERER,
                                            max_length=64, batch_size=4)
    cfg = sl_train.Config(log_path=str(tmp_path / "sl"), model_name=backend.model, recipe_name="test_sl",
                       dataset_builder=FromConversationFileBuilder(file_path=str(data), common_config=common),
                       learning_rate=1e-3, lora_rank=8, base_url=backend.url, save_every=2, eval_every=0,
                       renderer_name=RENDERER)
    asyncio.run(sl_train.main(cfg))
    metrics = [json.loads(l) for l in (tmp_path / "sl" / "metrics.jsonl").read_text().splitlines() if l.strip()]
    assert len(metrics) >= 3, f"expected >= 3 supervised steps, got {len(metrics)}"
    losses = [m["train_mean_nll"] for m in metrics if "train_mean_nll" in m]
    assert losses and all(l == l for l in losses)
    ckpts = (tmp_path / "sl" / "checkpoints.jsonl").read_text()
    assert "tinker://" in ckpts
