"""The SWE agent in one class: render the conversation with the model's chat template, sample,
parse tool calls, run them in the sandbox, repeat until submit or a budget runs out.

Token-exactness: the agent keeps the token sequence itself. Each turn appends exactly the
sampled tokens, then the tokens of the tool-response turn, so turn k+1's prompt always starts
with turn k's prompt + sampled tokens (what the chat template would render for the same
messages; tests check both). Only eliding old observations rewrites the prompt, which starts
a new training segment.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from tinker import types

from services.common.budgets import Budgets, elide_observations, truncate_observation
from services.common.renderers import renderer_for
from services.common.renderers.qwen3 import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, parse_tool_calls, tool_response_turn
from services.common.sandbox_api import Sandbox
from services.common.trajectory import SAMPLED, SampleOut, Segment, Trajectory, Turn

from .tools import ToolBox

SYSTEM_PROMPT = ("You are a software engineer fixing a bug in the repository at /workspace. "
                 "Use the tools to inspect the code, edit it, and call submit when the tests pass.")
NO_CALL = (f"No tool call found. Call a tool with {TOOL_CALL_OPEN}"
           f"{{\"name\": ..., \"arguments\": {{...}}}}{TOOL_CALL_CLOSE}.")


class Policy(Protocol):
    async def sample(self, prompt: list[int], max_tokens: int) -> SampleOut: ...


class TinkerPolicy:
    """Samples through an official tinker SamplingClient (one sequence per call)."""

    def __init__(self, sampling_client: Any, stop_token_ids: list[int], temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> None:
        self.client = sampling_client
        self.stop = list(stop_token_ids)
        self.temperature, self.top_p = temperature, top_p
        self.seed = seed      # with a seed, call k of this policy samples with seed + k: reproducible rollouts
        self.calls = 0

    def fork(self, seed: int | None) -> "TinkerPolicy":
        """The same sampler and settings with its own seed (one per rollout)."""
        return TinkerPolicy(self.client, self.stop, self.temperature, self.top_p, seed)

    async def sample(self, prompt: list[int], max_tokens: int) -> SampleOut:
        seed = None if self.seed is None else (self.seed + 7919 * self.calls) % (2**31)
        self.calls += 1
        res = await self.client.sample(types.ModelInput.from_ints(prompt), 1,
                                       types.SamplingParams(max_tokens=max_tokens, temperature=self.temperature,
                                                            top_p=self.top_p, stop=self.stop, seed=seed))
        s = res.sequences[0]
        return SampleOut(list(s.tokens), list(s.logprobs or []), s.stop_reason, source=SAMPLED)


class SWEAgent:
    def __init__(self, policy: Policy, tokenizer: Any, budgets: Budgets | None = None, tools: list[str] | None = None,
                 system_prompt: str = SYSTEM_PROMPT, test_command: str = "python -m pytest -q -x -p no:cacheprovider",
                 compact_schemas: bool = False) -> None:
        self.policy = policy
        self.tok = tokenizer
        self.budgets = budgets or Budgets()
        self.tool_names = tools
        self.system_prompt = system_prompt
        self.test_command = test_command
        self.compact_schemas = compact_schemas
        self.renderer = renderer_for(tokenizer)     # the chat format (services/common/renderers)
        self.eos_id = self.renderer.eos_id

    # ---- rendering
    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        return self.renderer.encode(self.renderer.render(messages, tools))

    def observation_tokens(self, observations: list[str]) -> list[int]:
        """Tokens of the tool-response user turn that follows an assistant turn's <|im_end|>."""
        return self.renderer.encode(tool_response_turn(observations))

    # ---- the loop
    async def run(self, instruction: str, sandbox: Sandbox, task_id: str = "") -> Trajectory:
        b = self.budgets
        tb = ToolBox(sandbox, self.tool_names, b.command_timeout_s, b.max_observation_chars, self.test_command,
                     self.compact_schemas)
        tools = tb.schemas()
        traj = Trajectory(task_id=task_id, instruction=instruction)
        traj.messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": instruction}]
        seg = Segment()
        seg.extend(self.render(traj.messages, tools), sampled=False)
        traj.segments.append(seg)
        t0 = time.time()
        n_obs_total = 0
        try:
            for turn_i in range(b.max_turns):
                if time.time() - t0 > b.trajectory_timeout_s:
                    traj.stop_reason = "timeout"
                    break
                room = min(b.max_output_tokens, b.max_context - len(seg.tokens))
                if len(seg.tokens) > b.max_input_tokens or room < 1:
                    traj.stop_reason, traj.masked = "context_overflow", b.mask_overflow
                    break
                ts = time.time()
                remaining = b.trajectory_timeout_s - (ts - t0)
                out = await asyncio.wait_for(self.policy.sample(seg.tokens, room), timeout=max(remaining, 1.0))
                sample_s = time.time() - ts
                turn = Turn(index=turn_i, segment=len(traj.segments) - 1, prompt_len=len(seg.tokens),
                            sampled_tokens=out.tokens, logprobs=out.logprobs, stop_reason=out.stop_reason, text="",
                            sample_s=sample_s, sampled_by=out.source)
                seg.extend(out.tokens, sampled=True, logprobs=out.logprobs)
                body = out.tokens
                if body and body[-1] == self.eos_id:
                    body = body[:-1]
                else:
                    seg.extend([self.eos_id], sampled=False)
                    turn.appended_eos = True
                turn.text = self.tok.decode(body, skip_special_tokens=False)
                traj.turns.append(turn)
                traj.messages.append({"role": "assistant", "content": turn.text})
                _, calls, errors = parse_tool_calls(turn.text, known=set(tb.tools), max_arg_chars=b.max_tool_call_chars)
                turn.tool_calls = [{"name": c.name, "arguments": c.arguments} for c in calls]
                turn.errors = errors
                tt = time.time()
                obs: list[str] = [f"Error: {e}" for e in errors]
                for c in calls:
                    obs.append(truncate_observation(await tb.call(c.name, c.arguments), b.max_observation_chars))
                    if tb.submitted:
                        break
                if not calls and not errors:
                    obs.append(NO_CALL)
                turn.observations = obs
                turn.tools_s = time.time() - tt
                if tb.submitted:
                    traj.stop_reason = "submitted"
                    break
                traj.messages += [{"role": "tool", "content": o} for o in obs]
                n_obs_total += len(obs)
                if elide_observations(traj.messages, b.keep_last_observations):
                    seg = Segment()  # the prompt was rewritten: a new training segment
                    seg.extend(self.render(traj.messages, tools), sampled=False)
                    traj.segments.append(seg)
                else:
                    seg.extend(self.observation_tokens(obs), sampled=False)
            else:
                traj.stop_reason = "max_turns"
            traj.episode_done = True
        except asyncio.TimeoutError:
            traj.stop_reason, traj.episode_done = "timeout", True
        except Exception as e:  # noqa: BLE001  (sampler/sandbox failure; the status tells a model-caused 4xx apart)
            traj.stop_reason, traj.error = "error", f"{type(e).__name__}: {e}"
            traj.error_status = getattr(e, "status_code", None)
        traj.timings["agent_s"] = time.time() - t0
        traj.timings["sample_s"] = sum(t.sample_s for t in traj.turns)
        traj.timings["tools_s"] = sum(t.tools_s for t in traj.turns)
        return traj
