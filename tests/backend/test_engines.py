"""Sampling engines (services/backend/engines): every registered engine implements ``SamplingEngine``, and
``engine.sampler`` selects the engine of that name, the one ``Runtime.sample`` then calls (docs/backend.md
"Sampling engines"). Runs in .venv-control (torch + transformers; no peft needed)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from helpers import TINY_PATH
from services.backend import engines
from services.backend.engines import ENGINES, SamplingEngine, SelectedWeights, engine_name, make_engine
from services.backend.runtime import Runtime
from services.backend.sampler import SampleResult, SampleSpec


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_each_registered_engine_implements_the_interface(name):
    cls = ENGINES[name]
    assert issubclass(cls, SamplingEngine) and cls.name == name
    assert not inspect.isabstract(cls), f"{cls.__name__} leaves {sorted(cls.__abstractmethods__)} unimplemented"
    assert cls.sample is not SamplingEngine.sample
    base_params = list(inspect.signature(SamplingEngine.sample).parameters)
    assert list(inspect.signature(cls.sample).parameters) == base_params, f"{cls.__name__}.sample's signature"
    eng = make_engine(name, "cpu", {"max_slots": 4}, 8)   # building one imports nothing optional (vllm) yet
    assert type(eng) is cls and eng.default_slots == 8 and isinstance(eng.yields, bool)


def test_the_config_name_selects_the_engine():
    assert set(ENGINES) == {"hf", "static", "vllm"}
    for name in ENGINES:
        assert engine_name(name, "cpu") == name and engine_name(name.upper(), "cuda") == name
    assert engine_name("auto", "cpu") == engine_name(None, "cpu") == "hf"
    assert engine_name("auto", "cuda:0") == "static"
    with pytest.raises(ValueError, match=r"engine.sampler must be auto, static, hf or vllm, got 'sglang'"):
        make_engine("sglang", "cpu", None, 8)


class _Recorder(SamplingEngine):
    """A test engine: serves the specs of at most ``max_prompt`` tokens with their prompt echoed back, hands the
    others to the fallback (the runtime's HF sampler)."""

    name = "recorder"

    def __init__(self, options, default_slots):
        super().__init__(options, default_slots)
        self.calls: list[tuple[str | None, int]] = []

    def sample(self, base, weights, specs, fallback, poll=None):
        self.calls.append((weights.key, len(specs)))
        out: list[SampleResult | None] = [None] * len(specs)
        short = [i for i, s in enumerate(specs) if len(s.prompt) <= self.options.get("max_prompt", 4)]
        for i in short:
            out[i] = SampleResult(sequences=[(list(specs[i].prompt), [0.0] * len(specs[i].prompt), "length")])
        rest = [i for i in range(len(specs)) if out[i] is None]
        for i, r in zip(rest, fallback([specs[i] for i in rest]) if rest else []):
            out[i] = r
        return out


def _runtime(tmp_path: Path, sampler: str, **kw) -> Runtime:
    return Runtime([{"name": "m", "path": str(TINY_PATH)}], tmp_path, sampler=sampler, threads=1, **kw)


def test_runtime_samples_through_the_engine_its_config_names(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setitem(ENGINES, "recorder", _Recorder)
    rt = _runtime(tmp_path / "a", "recorder", sampler_options={"max_prompt": 3})
    assert type(rt.engine) is _Recorder and not rt.pauses_sampling()
    short, long = SampleSpec(prompt=[5, 6, 7], max_tokens=4, seed=1), SampleSpec(prompt=[5, 6, 7, 8], max_tokens=4,
                                                                                     seed=1)
    res = rt.sample("m", None, [long, short])
    assert rt.engine.calls == [(None, 2)]
    assert res[1].sequences == [([5, 6, 7], [0.0, 0.0, 0.0], "length")]
    # the long spec went to the fallback: the HF sampler over the same weights, as engine.sampler 'hf' samples it
    hf = _runtime(tmp_path / "b", "hf")
    assert type(hf.engine) is engines.HFSampling and hf.pauses_sampling()
    assert res[0].sequences == hf.sample("m", None, [long])[0].sequences and len(res[0].sequences[0][0]) == 4


def test_engine_gets_the_runtime_weights(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setitem(ENGINES, "recorder", _Recorder)
    rt = _runtime(tmp_path, "recorder")
    with pytest.raises(Exception, match="no longer loaded"):
        rt.sample("m", "snap:gone", [SampleSpec(prompt=[1], max_tokens=1)])
    w = rt._sampling_weights(rt.bases["m"], None)
    assert isinstance(w, SelectedWeights) and w.key is None and w.sampler is None and w.module is rt.bases["m"].hf
