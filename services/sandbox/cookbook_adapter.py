"""Our sandboxes as ``tinker_cookbook.sandbox.SandboxInterface`` (tinker-cookbook 0.5.8), so the
cookbook's harbor_rl recipe can use them instead of Modal:

    client = SandboxManagerClient.from_config()
    factory = harbor_sandbox_factory(client, base_for=lambda env_dir: env_dir.parent / "repo")
    # pass `factory` as sandbox_factory to tinker_cookbook.recipes.harbor_rl

Importing this module also makes ``tinker_cookbook.recipes.harbor_rl`` importable without the
``modal`` package (see ``allow_harbor_rl_without_modal``): import it before the recipe.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
import threading
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tinker_cookbook import tokenizer_utils
from tinker_cookbook.sandbox.sandbox_interface import SandboxResult, SandboxTerminatedError
from transformers import AutoTokenizer

from .client import RemoteSandbox, SandboxManagerClient
from .errors import Conflict, NotFound

DEFAULT_MAX_OUTPUT = 128 * 1024
_MODAL_MODULE = "tinker_cookbook.sandbox.modal_sandbox"


class _ModalSandboxUnavailable:
    """Stands in for ModalSandbox when ``modal`` is not installed; only using it fails."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        raise ImportError("modal is not installed: pass a sandbox_factory (e.g. harbor_sandbox_factory) "
                          "to tinker_cookbook.recipes.harbor_rl instead of the Modal default")

    @classmethod
    async def create(cls, *a: Any, **kw: Any) -> Any:
        cls()


def allow_harbor_rl_without_modal() -> bool:
    """tinker-cookbook 0.5.8's ``recipes/harbor_rl/harbor_env.py`` imports
    ``tinker_cookbook.sandbox.modal_sandbox`` at module level, and that module raises ImportError
    unless the (cloud-only) ``modal`` package is installed, although the recipe only uses Modal in
    its default sandbox factory. When ``modal`` is missing, register a stub for that one module
    whose ``ModalSandbox``/``ModalSandboxPool`` raise only when used. Idempotent; returns True
    if the stub was installed. With ``modal`` installed nothing changes."""
    if _MODAL_MODULE in sys.modules or importlib.util.find_spec("modal") is not None:
        return False
    stub = types.ModuleType(_MODAL_MODULE)
    stub.__doc__ = "Stub installed by services.sandbox.cookbook_adapter: modal is not installed."
    stub.ModalSandbox = stub.ModalSandboxPool = _ModalSandboxUnavailable  # type: ignore[attr-defined]
    sys.modules[_MODAL_MODULE] = stub
    return True


allow_harbor_rl_without_modal()

_LOCKED_TOKENIZER_METHODS = ("__call__", "encode", "encode_plus", "batch_encode_plus", "decode", "batch_decode",
                             "convert_tokens_to_ids", "convert_ids_to_tokens", "apply_chat_template")


def register_thread_safe_tokenizer(model_name: str) -> Any:
    """Register (``tinker_cookbook.tokenizer_utils.register_tokenizer``, the cookbook's public hook)
    a HF tokenizer for ``model_name`` whose calls are serialised by a lock, and return it.

    Why: the cookbook's ``EnvFromMessageEnv`` renders prompts with ``asyncio.to_thread`` on one
    shared tokenizer, and 0.5.8's Qwen3 renderers alternate ``encode(..., split_special_tokens=True)``
    (message bodies) with plain ``encode`` (headers). transformers 5 then flips the Rust tokenizer's
    ``encode_special_tokens`` flag on every call; flipping it while another thread is encoding raises
    ``RuntimeError: Already borrowed`` (seen with harbor_rl, group size 2). Idempotent per name."""

    existing = tokenizer_utils._CUSTOM_TOKENIZER_REGISTRY.get(model_name)
    if existing is not None and getattr(existing, "_lts_thread_safe", False):
        return existing()
    tok = AutoTokenizer.from_pretrained(model_name.split(":", 1)[0])
    lock = threading.RLock()
    cls = type(tok)

    def locked(name: str) -> Callable[..., Any]:
        def method(self: Any, *a: Any, **kw: Any) -> Any:
            with lock:
                return getattr(super(safe_cls, self), name)(*a, **kw)
        method.__name__ = name
        return method

    safe_cls = type(f"ThreadSafe{cls.__name__}", (cls,),
                    {n: locked(n) for n in _LOCKED_TOKENIZER_METHODS if hasattr(cls, n)})
    tok.__class__ = safe_cls

    def factory() -> Any:
        return tok
    factory._lts_thread_safe = True  # type: ignore[attr-defined]
    tokenizer_utils.register_tokenizer(model_name, factory)
    return tok


class CookbookSandbox:
    """Implements tinker_cookbook.sandbox.SandboxInterface over a RemoteSandbox."""

    def __init__(self, sandbox: RemoteSandbox):
        self._sb = sandbox

    @property
    def sandbox_id(self) -> str:
        return self._sb.sandbox_id

    async def send_heartbeat(self, timeout: int = 30) -> None:
        try:
            await self._sb.heartbeat()
        except (NotFound, Conflict) as e:
            raise SandboxTerminatedError(str(e)) from e

    async def run_command(self, command: str, workdir: str | None = None, timeout: int = 60,
                          max_output_bytes: int | None = None) -> SandboxResult:
        try:
            r = await self._sb.execute(command, timeout=timeout, cwd=workdir or "/workspace",
                                       max_output=max_output_bytes or DEFAULT_MAX_OUTPUT)
        except (NotFound, Conflict) as e:
            raise SandboxTerminatedError(str(e)) from e
        metrics: dict[str, Any] = {k: r[k] for k in ("timed_out", "truncated", "duration_s") if k in r}
        return SandboxResult(stdout=r.get("stdout", ""), stderr=r.get("stderr", ""),
                             exit_code=-1 if r.get("exit_code") is None else r["exit_code"], metrics=metrics)

    async def read_file(self, path: str, max_bytes: int | None = None, timeout: int = 60) -> SandboxResult:
        cmd = (f"head -c {int(max_bytes)} -- {shlex.quote(path)}" if max_bytes is not None
               else f"cat -- {shlex.quote(path)}")
        return await self.run_command(cmd, workdir="/", timeout=timeout, max_output_bytes=max_bytes or 16 * 1024 * 1024)

    async def write_file(self, path: str, content: str | bytes, executable: bool = False,
                         timeout: int = 60) -> SandboxResult:
        try:
            await self._sb.write_file(path, content, mode=0o755 if executable else None)
        except (NotFound, Conflict) as e:
            raise SandboxTerminatedError(str(e)) from e
        except Exception as e:  # same contract as the cookbook's Modal sandbox: errors as a result
            return SandboxResult(stdout="", stderr=str(e), exit_code=1)
        return SandboxResult(stdout="", stderr="", exit_code=0)

    async def cleanup(self) -> None:
        await self._sb.close()


def harbor_sandbox_factory(client: SandboxManagerClient,
                           base_for: Callable[[Path], str | Path | None] = lambda env_dir: None,
                           limits: dict[str, Any] | None = None) -> Callable[[Path, int], Awaitable[CookbookSandbox]]:
    """A ``SandboxFactory`` for tinker_cookbook.recipes.harbor_rl: (env_dir, timeout) -> sandbox.
    ``base_for`` maps a task's environment/ dir to the host directory used as /workspace."""
    async def factory(env_dir: Path, timeout: int) -> CookbookSandbox:
        base = base_for(Path(env_dir))
        sb = await client.create(base_dir=str(base) if base else None, limits=limits, ttl_s=float(timeout))
        return CookbookSandbox(sb)
    return factory
