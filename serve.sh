#!/usr/bin/env bash
# Start a project service in the foreground (Ctrl-C stops it cleanly).
#
#   bash serve.sh backend [--port N] [--config config/runtime.yaml] ...   Tinker-compatible backend (default port 19210)
#   bash serve.sh admin   [--port N] ...                                  sandbox manager API (default port 18080)
#   bash serve.sh worker  [--port N] ...                                  sandbox worker (runs sandboxes on this host; default port 22555)
#   bash serve.sh modelservice ...                                        OpenAI-compatible ModelService for in-sandbox agents (port 28080)
#
# Every service has --help, binds 127.0.0.1 by default, needs its key and logs under state/logs/.
set -euo pipefail
[[ -d "${TASK:-}" ]] && TASK="$(cd "$TASK" && pwd)"   # the seed's task root: configs in $TASK/config/ (docs/seed-mapping.md)
cd "$(dirname "$0")"

need() { [[ -x "$1/bin/python" ]] || { echo "serve.sh: $1 is missing: run 'bash setup.sh ${2}' first" >&2; exit 1; }; }
need_config() {   # where the services read configs: services/common/paths.py's rule ($LTS_CONFIG_DIR, $TASK/config, config)
  local d; d="$(.venv-runtime/bin/python -m services.common.paths CONFIG_DIR)"
  [[ -f "$d/runtime.yaml" ]] || { echo "serve.sh: $d/ is missing: run 'python configure.py' first" >&2; exit 1; }; }

svc="${1:-}"; shift || true
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
case "$svc" in
  backend)
    need .venv-runtime runtime
    [[ " $* " == *" --config "* || " $* " == *" --help "* || " $* " == *" -h "* ]] || need_config
    export HF_HOME="${HF_HOME:-$(pwd)/hf-home}" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
    exec .venv-runtime/bin/python -m services.backend "$@" ;;
  admin|worker)
    need .venv-control control
    exec .venv-control/bin/python -m services.sandbox "$svc" "$@" ;;
  modelservice)
    need .venv-control control
    exec .venv-control/bin/python -m services.modelservice "$@" ;;
  -h|--help|help|"") sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; [[ -n "$svc" ]] ;;
  *) echo "serve.sh: unknown service '$svc' (backend | admin | worker | modelservice)" >&2; exit 2 ;;
esac
