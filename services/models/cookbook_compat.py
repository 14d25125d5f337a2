"""Teach tinker-cookbook's model registry about our ``local/`` models (opt-in, in-process).

The cookbook resolves *tokenizers* by name through ``AutoTokenizer`` (the HF-cache
registration makes that work offline with no code here).  Its *renderer* lookup,
``model_info.get_recommended_renderer_name(model_name)``, only knows published
organisations (Qwen, meta-llama, ...) and raises ``ConfigurationError`` for ``local/...``.
Most entry points take ``renderer_name=`` explicitly (use ``"qwen3_instruct"``), but a few
recipes (``recipes/rl_loop.py``, ``recipes/sl_loop.py``, ``recipes/rl_basic.py``) always
ask the registry.  ``install()`` extends the registry for the ``local`` organisation only:
attributes come from the model's own ``local_tinker.json`` (renderer ``qwen3_instruct``);
every other name goes to the original function unchanged.

    python -m services.models cookbook tinker_cookbook.recipes.rl_loop model_name=local/qwen3-tiny-xs ...
"""

from __future__ import annotations

import json
import runpy
import sys

from .hf_cache import registered_path

LOCAL_ORG = "local"
DEFAULT_RENDERER = "qwen3_instruct"


def local_model_attributes(model_name: str):
    from tinker_cookbook.model_info import ModelAttributes  # noqa: PLC0415 (.venv-runtime has no tinker_cookbook)

    base = model_name.split(":", 1)[0]
    meta: dict = {}
    snap = registered_path(base)
    if snap is not None and (snap / "local_tinker.json").exists():
        meta = json.loads((snap / "local_tinker.json").read_text())
    renderer = meta.get("recommended_renderer", DEFAULT_RENDERER)
    return ModelAttributes(organization=LOCAL_ORG, version_str="3", size_str=str(meta.get("size", "tiny")),
                           is_chat=True, recommended_renderers=(renderer,))


def install() -> None:
    """Idempotently wrap ``tinker_cookbook.model_info.get_model_attributes`` for ``local/*`` names."""
    from tinker_cookbook import model_info  # noqa: PLC0415 (.venv-runtime has no tinker_cookbook)

    original = model_info.get_model_attributes
    if getattr(original, "_local_tinker", False):
        return

    def get_model_attributes(model_name: str):
        if model_name.split(":", 1)[0].split("/", 1)[0] == LOCAL_ORG:
            return local_model_attributes(model_name)
        return original(model_name)

    get_model_attributes._local_tinker = True  # type: ignore[attr-defined]
    get_model_attributes.__doc__ = original.__doc__
    model_info.get_model_attributes = get_model_attributes


def run_module(module: str, args: list[str]) -> None:
    """``install()`` then run ``module`` as ``__main__`` with ``args`` (chz/argparse see them as argv)."""

    install()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
