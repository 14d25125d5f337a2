"""Issue 5, acceptance 1 (client-side agent): a multi-turn rollout sampled through the official
SDK against our backend stores tokens that decode to what the agent received, prompts that extend
exactly, and logprobs equal to the backend's compute_logprobs on the same tokens."""

from __future__ import annotations

import asyncio

import numpy as np
import tinker
from tinker import types
from transformers import AutoTokenizer

from cookbook.agent import Budgets, SWEAgent
from cookbook.agent.agent import TinkerPolicy
from helpers import REPO
from services.tasks.preparation.hostsandbox import HostSandbox
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset


def test_sampled_multi_turn_rollout_is_token_exact(backend, tmp_path):
    tok = AutoTokenizer.from_pretrained(str(backend.model_path))
    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    build_base(task, tmp_path / "base")
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    sampler = sc.create_sampling_client(base_model=backend.model)
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    async def go():
        sb = await HostSandbox.create(base_dir=tmp_path / "base")
        try:
            agent = SWEAgent(TinkerPolicy(sampler, [eos], seed=5), tok, Budgets(max_turns=4, max_output_tokens=24),
                             tools=["read", "edit", "submit"], compact_schemas=True)
            return await agent.run(task.instruction, sb, task.name)
        finally:
            await sb.close()

    traj = asyncio.run(go())
    assert len(traj.turns) >= 2 and traj.episode_done, traj.stop_reason
    for seg_i, seg in enumerate(traj.segments):
        turns = [t for t in traj.turns if t.segment == seg_i]
        for k, t in enumerate(turns):
            start = t.prompt_len
            assert seg.tokens[start: start + len(t.sampled_tokens)] == t.sampled_tokens
            body = t.sampled_tokens[:-1] if t.sampled_tokens[-1] == eos else t.sampled_tokens
            assert tok.decode(body) == t.text, "stored tokens decode to the text the agent parsed"
            if k + 1 < len(turns):
                assert turns[k + 1].prompt_len > start + len(t.sampled_tokens)
        # the backend's logprobs of the same tokens equal the sampler's, at every sampled position
        lps = sampler.compute_logprobs(types.ModelInput.from_ints(seg.tokens)).result(timeout=120)
        pos = [i for i, s in enumerate(seg.sampled) if s]
        got = np.array([lps[i] for i in pos], dtype=np.float64)
        want = np.array([seg.logprobs[i] for i in pos], dtype=np.float64)
        assert np.abs(got - want).max() < 1e-3, np.abs(got - want).max()
