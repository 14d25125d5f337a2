"""Sampling through the official tinker SDK (``SamplingClient``) against our backend.

``TinkerSampler``: one SamplingClient (base model or ``tinker://.../sampler_weights/...``).
Sessions created with ``replay`` (a test double, sessions.py) are teacher-forced through the same
client's ``compute_logprobs`` instead of sampled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import tinker
from tinker import types

from services.common.trajectory import SAMPLED, SampleOut

log = logging.getLogger(__name__)


class TinkerSampler:
    def __init__(self, base_url: str, api_key: str, base_model: str | None = None, model_path: str | None = None):
        if not base_model and not model_path:
            raise ValueError("tinker.base_model or tinker.model_path is required")
        self.base_url, self.api_key = base_url, api_key
        self.base_model, self.model_path = base_model, model_path
        self.service: Any = None
        self.client: Any = None

    @property
    def model_name(self) -> str:
        return self.model_path or self.base_model or ""

    async def start(self) -> None:
        def make():
            self.service = tinker.ServiceClient(base_url=self.base_url, api_key=self.api_key)
            return self.service.create_sampling_client(model_path=self.model_path, base_model=self.base_model)

        fut = await asyncio.to_thread(make)
        self.client = await fut if hasattr(fut, "__await__") else fut

    def tokenizer(self):
        return self.client.get_tokenizer()

    async def sample(self, prompt: list[int], max_tokens: int, stop: list[int], temperature: float = 1.0,
                     top_p: float = 1.0, seed: int | None = None, session: str = "") -> SampleOut:
        params = types.SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, stop=stop, seed=seed)
        res = await self.client.sample(types.ModelInput.from_ints(prompt), 1, params)
        s = res.sequences[0]
        return SampleOut(list(s.tokens), [float(x) for x in (s.logprobs or [])], str(s.stop_reason), source=SAMPLED)

    async def compute_logprobs(self, tokens: list[int]) -> list[float | None]:
        return list(await self.client.compute_logprobs(types.ModelInput.from_ints(tokens)))

    async def close(self) -> None:
        for obj in (self.client, self.service):
            for name in ("close", "aclose"):
                fn = getattr(obj, name, None)
                if fn:
                    try:
                        r = fn()
                        if asyncio.iscoroutine(r):
                            await r
                    except Exception:  # noqa: BLE001  (best effort at shutdown)
                        pass
                    break
