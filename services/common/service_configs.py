"""The shared config files' typed models: runtime.yaml (+ engine.yaml), harbor.yaml. Each mirrors its template
(templates/*.yaml, rendered by configure.py) and refuses unknown keys (``ConfigModel``); a default written here
is the one the service uses when the key is absent. ``None`` marks a key whose default belongs to the code
that reads it (named in the comment). The sandbox manager's admin.yaml is typed in services/sandbox/config.py,
the ModelService's modelservice.yaml in services/modelservice/config.py."""

from __future__ import annotations

from typing import Any, Literal

from .config_schema import ConfigModel

Number = int | float
Size = int | float | str   # sizes in MB also as "2g", "512m" (services/sandbox/limits.py parse_size_mb)


# --- runtime.yaml / engine.yaml -------------------------------------------------------------------------------

class ApiKey(ConfigModel):
    """``backend.api_keys`` entry of a tenant (docs/security.md): a plain string is an admin key."""

    key: str
    owner: str | None = None
    admin: bool | None = None


class BackendSection(ConfigModel):
    host: str = "127.0.0.1"
    port: int = 19210
    api_keys: list[str | ApiKey] = []
    state_dir: str = "state/backend"
    log_file: str = "state/logs/backend.log"
    log_level: str = "INFO"
    batch_window_s: float = 0.002
    batch_window_max_s: float = 0.05
    sample_round_tokens: int = 4096
    # read by state.py / wire.Limits / lifecycle.py, which hold their defaults (None: theirs)
    long_poll_s: float | None = None
    default_max_tokens: int | None = None
    max_body_mb: float | None = None
    max_lora_rank: int | None = None
    max_sample_tokens: int | None = None
    max_batch_tokens: int | None = None
    session_timeout_s: float | None = None
    future_ttl_s: float | None = None
    unretrieved_future_ttl_s: float | None = None
    reap_every_s: float | None = None


class RaySection(ConfigModel):
    """``engine.ray`` (docs/ray.md); None: services/backend/ray_runtime.py's default."""

    address: str | None = None
    trainers: int | None = None
    samplers: int | None = None
    resources: dict[str, dict[str, float]] | None = None
    num_cpus: int | None = None
    strategy: str | None = None
    start_timeout_s: float | None = None


class EngineSection(ConfigModel):
    """``engine:`` of engine.yaml (templates/engine.yaml explains each key); also allowed under runtime.yaml's
    ``runtime:``, which engine.yaml's values override."""

    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = None
    max_tokens_per_microbatch: int = 8192
    max_batch_sequences: int = 256
    gradient_checkpointing: bool = False
    merge_lora_sampling: bool | Literal["auto"] = "auto"
    training_kernels: str = "auto"
    sampler: str = "auto"
    sampler_options: dict[str, Any] | None = None
    max_sampler_snapshots: int = 16
    max_sampler_gb: float | None = None     # None: unbounded
    max_spill_gb: float | None = 8
    ray: RaySection | None = None


class ModelEntry(ConfigModel):
    """A base model the backend serves (configure.py writes the tiny default: TINY_MODEL_NAME/PATH)."""

    name: str
    path: str                                 # a directory (relative to the repository root) or an HF id
    tokenizer_id: str | None = None           # None: the name
    max_context: int | None = None            # None: the model's config.json


class RuntimeSection(EngineSection):
    models: list[ModelEntry] = []


class RuntimeFile(ConfigModel):
    """runtime.yaml: the backend (``python -m services.backend``)."""

    backend: BackendSection = BackendSection()
    engine_config: str | None = None          # engine.yaml, relative to the repository root
    runtime: RuntimeSection = RuntimeSection()


class EngineFile(ConfigModel):
    """engine.yaml: device / dtype / batching of the backend's runtime."""

    engine: EngineSection = EngineSection()


# --- harbor.yaml (the client side: run.sh, the sandbox client, the ModelService's budgets) -----------------------

class LimitsSection(ConfigModel):
    """Per-sandbox limits (services/sandbox/limits.py ``Limits`` holds the defaults)."""

    memory_mb: Size | None = None
    cpus: Number | None = None
    pids: int | None = None
    disk_mb: Size | None = None
    nofile: int | None = None
    file_size_mb: Size | None = None
    cpu_time_s: Number | None = None
    address_space_mb: Size | None = None


class HarborSandbox(ConfigModel):
    """None: services/sandbox/client.py's / cookbook's default."""

    base_url: str | None = None
    flavor: str | None = None
    backend: str | None = None
    key: str | None = None
    key_header: str | None = None
    cluster: str | None = None
    image: str | None = None
    extra_headers: dict[str, str] | None = None
    default_limits: LimitsSection | None = None
    ttl_s: Number | None = None


class Grading(ConfigModel):
    mode: str | None = None                   # None: clean


class Budgets(ConfigModel):
    """``agent.budgets`` (services/common/budgets.py ``Budgets`` holds the defaults; a test keeps the keys equal)."""

    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_context: int | None = None
    max_observation_chars: int | None = None
    keep_last_observations: int | None = None
    max_tool_call_chars: int | None = None
    max_turns: int | None = None
    command_timeout_s: Number | None = None
    trajectory_timeout_s: Number | None = None
    mask_overflow: bool | None = None


class Agent(ConfigModel):
    """``agent:`` (cookbook/rollout.py ``AgentConfig`` holds the defaults)."""

    temperature: Number | None = None
    tools: list[str] | None = None
    compact_schemas: bool | None = None
    system_prompt: str | None = None
    budgets: Budgets | None = None


class Tasks(ConfigModel):
    root: str | None = None
    task_id: str | None = None


class Run(ConfigModel):
    rollout_only: bool | None = None


class HarborFile(ConfigModel):
    """harbor.yaml: where rollouts get sandboxes, grading, the agent's budgets, the task root."""

    sandbox: HarborSandbox | None = None
    grading: Grading | None = None
    agent: Agent | None = None
    tasks: Tasks | None = None
    run: Run | None = None


# The files services.common.config.load_config checks by name (admin.yaml: services/sandbox/config.py).
SCHEMAS: dict[str, type[ConfigModel]] = {"runtime": RuntimeFile, "engine": EngineFile, "harbor": HarborFile}
