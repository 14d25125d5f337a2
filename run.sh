#!/usr/bin/env bash
# Run the project's jobs.
#
#   bash run.sh quickstart            set everything up (offline-capable) and train the embedded default: sft, then grpo
#   bash run.sh test [pytest args]    the test suite (what CI runs)
#   bash run.sh lint                  ruff, mypy over the typed core, the import rules (CI runs it before the tests)
#   bash run.sh rollout --task-id ID  evaluate an agent on tasks      (see: bash run.sh rollout --help)
#   bash run.sh sft|grpo|ppo|ppo-kl   train an SWE agent              (see: bash run.sh grpo --help)
#                                     without --preset: the seed's meaning, e.g. ppo = one rollout + one update
#                                     of the configured task (docs/seed-mapping.md); every mode of the recipe
#                                     registry (cookbook/recipes/__init__.py) runs the same way
#   bash run.sh export CHECKPOINT --out DIR [--adapter]   a checkpoint -> Hugging Face model dir (or PEFT adapter)
#   bash run.sh eval MODEL [--tasks DIR]   Harbor's runner + terminus-2 through the backend's /oai on a checkpoint
#
# Training/rollout modes create runs/<mode>-<timestamp>/ (printed at start), start the backend and
# sandbox manager if they are not running, and stop what they started, also on Ctrl-C.
set -euo pipefail
[[ -d "${TASK:-}" ]] && TASK="$(cd "$TASK" && pwd)"   # the seed's task root: configs in $TASK/config/, runs in $TASK/runs/
cd "$(dirname "$0")"
ROOT="$(pwd)"
export HF_HOME="${HF_HOME:-$ROOT/hf-home}" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" TOKENIZERS_PARALLELISM=false

cfg_dir() { .venv-control/bin/python -m services.common.paths CONFIG_DIR; }   # services/common/paths.py's rule
need_control() { [[ -x .venv-control/bin/python ]] || { echo "run.sh: run 'bash setup.sh all' first" >&2; exit 1; }; }

mode="${1:-}"; shift || true
case "$mode" in
  test)
    need_control
    set +e
    .venv-control/bin/python -m pytest tests "$@"
    rc=$?
    set -e
    [[ $rc -eq 5 ]] && { echo "run.sh: no tests were collected" >&2; exit 1; }
    exit $rc ;;
  lint)  # each check runs even when an earlier one fails; exit 1 when any failed
    need_control
    rc=0
    echo "[lint] ruff check (pyproject.toml [tool.ruff])"
    .venv-control/bin/python -m ruff check . || rc=1
    echo "[lint] mypy over the typed core (pyproject.toml [tool.mypy])"
    .venv-control/bin/python -m mypy || rc=1
    echo "[lint] import rules (tests/test_imports.py)"
    .venv-control/bin/python -m pytest -q tests/test_imports.py || rc=1
    [[ $rc -eq 0 ]] && echo "[lint] all passed" || echo "run.sh lint: failed (see above)" >&2
    exit $rc ;;
  quickstart)
    step() {  # step N WHAT FIX CMD...: on failure, name the step and the fix
      local n="$1" what="$2" fix="$3" rc=0; shift 3
      echo "[quickstart] step $n/4: $what"
      "$@" || rc=$?
      if [[ $rc -ne 0 ]]; then echo "run.sh quickstart: step $n/4 ($what) failed (exit $rc). Fix: $fix" >&2; exit "$rc"; fi
    }
    logs="the run directory printed above ('Run directory: ...') holds client.log, backend.log and sandbox-admin.log"
    step 1 "set-up: bash setup.sh all" "the 'setup.sh: error:' line above names the failing check or package and what to do; then re-run (set-up is idempotent)" \
      bash setup.sh all
    if [[ ! -f "$(cfg_dir)/runtime.yaml" ]]; then
      step 2 "configuration: python configure.py" "see the error above; 'python configure.py --help' lists the options" .venv-control/bin/python configure.py
    fi
    step 3 "SFT warm start: bash run.sh sft --preset quickstart" "$logs; continue with 'bash run.sh sft --preset quickstart --resume RUN_DIR'" \
      .venv-control/bin/python -m cookbook.cli sft --preset quickstart "$@"
    step 4 "GRPO: bash run.sh grpo --preset quickstart" "$logs; continue with 'bash run.sh grpo --preset quickstart --resume RUN_DIR'" \
      .venv-control/bin/python -m cookbook.cli grpo --preset quickstart "$@" ;;
  export)
    [[ -x .venv-runtime/bin/python ]] || { echo "run.sh: run 'bash setup.sh runtime' first" >&2; exit 1; }
    exec .venv-runtime/bin/python -m services.backend.export "$@" ;;
  eval)
    need_control
    [[ -f "$(cfg_dir)/runtime.yaml" ]] || .venv-control/bin/python configure.py
    exec .venv-control/bin/python -m cookbook.harbor_eval "$@" ;;
  -h|--help|help|"") sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; [[ -n "$mode" ]] ;;
  *)  # a recipe of the registry (cookbook/recipes/__init__.py): rollout, sft, grpo, ppo, ppo-kl, ...; argparse names
      # the registered modes when MODE is none of them
    need_control
    [[ -f "$(cfg_dir)/runtime.yaml" ]] || .venv-control/bin/python configure.py
    exec .venv-control/bin/python -m cookbook.cli "$mode" "$@" ;;
esac
