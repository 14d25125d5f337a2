#!/usr/bin/env bash
# Set up the project's two Python environments (idempotent; safe to re-run).
#
#   bash setup.sh control   # .venv-control: tinker SDK, tinker-cookbook, rl-rock, sandbox manager, recipes, tests
#   bash setup.sh runtime   # .venv-runtime: torch, transformers, peft, FastAPI backend + the tiny default model
#   bash setup.sh agent     # .venv-agent: mini-swe-agent (unmodified) for agents inside sandboxes (docs/modelservice.md)
#   bash setup.sh system    # Debian packages the sandboxes need (bubblewrap, ...); needs root
#   bash setup.sh all       # system (if root) + sandbox host check + control + runtime + agent
#   bash setup.sh check     # can the local sandboxes (bubblewrap, user namespaces) run here? says the fix if not
#   bash setup.sh docker    # docker.io + dockerd (if none runs) + the offline base image (root; docker-stop stops it)
#   bash setup.sh harbor    # .venv-harbor: Harbor's own runner (Python 3.12), an outside check of the sandboxes
#   bash setup.sh rock      # .venv-rock: a real ROCK admin (rl-rock[admin], Python 3.11) for tests/rockhost (docs/sandbox.md)
#
# Each step ends with a JSON report of what is installed and whether it imports.
# Environment: PYTHON (interpreter for the venvs: 3.11-3.13; default python3.11), LTS_TORCH_INDEX (torch build:
# auto | URL | pypi | none, see install_torch), LTS_SKIP_MODEL=1 (no tiny model), LTS_SKIP_SANDBOX_CHECK=1.
set -euo pipefail
cd "$(dirname "$0")"
ROOT="$(pwd)"

usage() { awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; }

die() { echo "setup.sh: error: $*" >&2; exit 1; }

find_python() {  # an interpreter 3.11-3.13 with venv + ensurepip (installs python3-venv on Debian when root)
  local cand="${PYTHON:-}" c
  if [[ -z "$cand" ]]; then
    for c in python3.11 "$HOME/.pyenv/versions/3.11.7/bin/python3.11" python3.12 python3.13 python3; do
      if command -v "$c" >/dev/null 2>&1; then cand="$c"; break; fi
    done
  fi
  [[ -n "$cand" ]] || die "no Python found: install Python 3.11, 3.12 or 3.13 (Debian/Ubuntu: apt-get install python3 python3-venv), or set PYTHON=/path/to/python3"
  local ver
  ver="$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || die "$cand does not run"
  case "$ver" in
    3.11|3.12|3.13) ;;
    *) die "$cand is Python $ver; this project supports Python 3.11-3.13 (set PYTHON=/path/to/python3.11)";;
  esac
  if ! "$cand" -c 'import venv, ensurepip' 2>/dev/null; then
    if [[ "$(id -u)" == "0" ]] && command -v apt-get >/dev/null 2>&1; then
      echo "[setup] $cand lacks venv/ensurepip: apt-get install python3-venv python$ver-venv" >&2
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python$ver-venv" >/dev/null 2>&1 || true; } >&2
    fi
    "$cand" -c 'import venv, ensurepip' 2>/dev/null \
      || die "$cand lacks venv/ensurepip: run 'sudo apt-get install python3-venv python$ver-venv' (Debian/Ubuntu), then re-run"
  fi
  echo "$cand"
}

# --- torch: which build (docs: README "What set-up installs") ----------------------------------------
# LTS_TORCH_INDEX picks where torch comes from:
#   unset (auto)  GPU host (nvidia-smi lists a GPU): pip's default index, whose Linux torch is the CUDA build.
#                 No GPU: a CPU build: the one pip finds already (a local wheel/mirror "+cpu" build), else
#                 the PyTorch CPU index https://download.pytorch.org/whl/cpu (about 200 MB instead of several GB).
#   URL           that index (e.g. https://download.pytorch.org/whl/cu128 for another CUDA version, or a mirror)
#   pypi          whatever pip's configured index gives (on x86 Linux: the CUDA build)
#   none          no torch at all (control environment only; nothing that imports torch will work)
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"

install_torch() {  # install_torch VENV_PYTHON PIN
  local vpy="$1" pin="$2" choice="${LTS_TORCH_INDEX:-auto}" picked
  case "$choice" in
    none) echo "[setup] LTS_TORCH_INDEX=none: not installing torch"; return 0 ;;
    pypi) echo "[setup] installing $pin from pip's configured index (LTS_TORCH_INDEX=pypi)"
          "$vpy" -m pip install -q "$pin" || die "could not install $pin from pip's configured index"; return 0 ;;
    auto) ;;
    *) echo "[setup] installing $pin from $choice (LTS_TORCH_INDEX)"
       "$vpy" -m pip install -q --index-url "$choice" "$pin" \
         || die "could not install $pin from $choice (LTS_TORCH_INDEX): check the URL, or unset it for the automatic choice"
       return 0 ;;
  esac
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "[setup] GPU found (nvidia-smi): installing $pin from pip's index (the CUDA build; set LTS_TORCH_INDEX to choose another)"
    "$vpy" -m pip install -q "$pin" || die "could not install $pin (set LTS_TORCH_INDEX=<index URL> for a mirror)"
    return 0
  fi
  if [[ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]]; then  # PyPI's torch for other platforms is the CPU build
    echo "[setup] no GPU ($(uname -s)/$(uname -m)): installing $pin from pip's index (a CPU build there)"
    "$vpy" -m pip install -q "$pin" || die "could not install $pin"
    return 0
  fi
  picked="$("$vpy" -m pip install -q --dry-run --no-deps --ignore-installed --report - "$pin" 2>/dev/null \
    | "$vpy" -c 'import json, sys; print(json.load(sys.stdin)["install"][0]["metadata"]["version"])' 2>/dev/null || true)"
  if [[ "$picked" == *+cpu ]]; then
    echo "[setup] no GPU: installing torch $picked (a CPU build pip already finds)"
    "$vpy" -m pip install -q "$pin" || die "could not install $pin"
  else
    echo "[setup] no GPU: installing $pin as the CPU build from $TORCH_CPU_INDEX (pip's own index offers ${picked:-nothing}, a CUDA build)"
    local why="unreachable from here"
    "$vpy" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=15)' "$TORCH_CPU_INDEX" 2>/dev/null \
      && why="pip failed" && "$vpy" -m pip install -q --index-url "$TORCH_CPU_INDEX" "$pin" \
      || die "could not install the CPU build of $pin from $TORCH_CPU_INDEX ($why). Set LTS_TORCH_INDEX to a reachable index or mirror that has it, or LTS_TORCH_INDEX=pypi to take pip's default (CUDA) build, several GB"
  fi
}

# make_venv NAME REQUIREMENTS
make_venv() {
  local name="$1" req="$2" py venv stamp want
  venv="$ROOT/.venv-$name"
  stamp="$venv/.lts-installed"
  want="$( (cat "$req" pyproject.toml; [[ -z "${LTS_TORCH_INDEX:-}" ]] || echo "torch:$LTS_TORCH_INDEX") | sha256sum | cut -c1-16)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
    echo "[setup] .venv-$name is up to date ($req unchanged)"
    return 0
  fi
  py="$(find_python)"
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "[setup] creating .venv-$name with $py"
    "$py" -m venv "$venv"
  fi
  echo "[setup] installing $req into .venv-$name (this takes a few minutes the first time)"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # torch first and alone, pinned, so that no other package can pull a different (CUDA) build
  local torch_pin
  torch_pin="$(grep -E '^torch==' "$req" || true)"
  [[ -z "$torch_pin" ]] || install_torch "$venv/bin/python" "$torch_pin"
  if [[ "${LTS_TORCH_INDEX:-}" == "none" ]]; then  # the requirements are a full lock: install it without torch
    grep -vE '^torch==' "$req" > "$venv/.requirements-no-torch.txt"
    "$venv/bin/python" -m pip install -q --no-deps -r "$venv/.requirements-no-torch.txt" || die "pip install -r $req (without torch) failed"
  else
    "$venv/bin/python" -m pip install -q -r "$req" || die "pip install -r $req failed (see the messages above)"
  fi
  "$venv/bin/python" -m pip install -q --no-deps -e . || die "could not install the project into .venv-$name"
  echo "$want" > "$stamp"
}

report() {  # report NAME MODULE...
  local name="$1"; shift
  "$ROOT/.venv-$name/bin/python" - "$name" "$@" <<'EOF'
import importlib, json, os, platform, sys
name, mods = sys.argv[1], sys.argv[2:]
if os.environ.get("LTS_TORCH_INDEX") == "none":  # set up without torch on purpose
    mods = [m for m in mods if m != "torch"]
rep = {"venv": f".venv-{name}", "python": platform.python_version(), "ok": True, "packages": {}}
for m in mods:
    try:
        mod = importlib.import_module(m)
        rep["packages"][m] = getattr(mod, "__version__", "ok")
    except Exception as e:  # noqa: BLE001
        rep["packages"][m] = f"IMPORT FAILED: {type(e).__name__}: {e}"
        rep["ok"] = False
try:
    import torch
    rep["torch_cuda"] = torch.cuda.is_available()
    rep["torch_build"] = torch.__version__
except Exception:
    pass
print(json.dumps(rep, indent=1))
sys.exit(0 if rep["ok"] else 1)
EOF
}

setup_control() {
  make_venv control requirements/control.txt
  report control tinker tinker_cookbook torch transformers rock docker fastapi uvicorn httpx yaml pytest matplotlib services.common cookbook \
    || die "control environment check failed (see the report above)"
}

setup_runtime() {
  make_venv runtime requirements/runtime.txt
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "[setup] GPU found: installing requirements/gpu.txt (Liger fused training kernels) into .venv-runtime"
    "$ROOT/.venv-runtime/bin/python" -m pip install -q --no-deps -r requirements/gpu.txt || die "pip install -r requirements/gpu.txt failed"
  fi
  report runtime torch transformers peft fastapi uvicorn tinker safetensors yaml services.backend \
    || die "runtime environment check failed (see the report above)"
  if [[ "${LTS_SKIP_MODEL:-0}" != "1" ]]; then
    if [[ -f models/qwen3-tiny-xs/config.json && -d hf-home/hub/models--local--qwen3-tiny-xs ]]; then
      echo "[setup] tiny default model present: models/qwen3-tiny-xs (local/qwen3-tiny-xs)"
    else
      echo "[setup] creating the tiny default model (offline, seconds)"
      .venv-runtime/bin/python -m services.models make-tiny --register >/dev/null
      echo "[setup] created models/qwen3-tiny-xs, registered as local/qwen3-tiny-xs in hf-home/"
    fi
  fi
}

setup_agent() {
  [[ -x .venv-control/bin/python ]] || setup_control
  local want; want="$(sha256sum requirements/agent.txt | cut -c1-16)"
  if [[ -f .venv-agent/.lts-installed && "$(cat .venv-agent/.lts-installed)" == "$want" ]]; then
    echo "[setup] .venv-agent is up to date"
  else
    echo "[setup] installing requirements/agent.txt into .venv-agent (mini-swe-agent)"
    .venv-control/bin/python -m cookbook.modelservice install-agent || die "could not create .venv-agent"
    echo "$want" > .venv-agent/.lts-installed
  fi
  printf '{"venv": ".venv-agent", "minisweagent": "%s"}\n' \
    "$(LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_SILENT_STARTUP=1 .venv-agent/bin/python -c 'import minisweagent; print(minisweagent.__version__)' 2>/dev/null || echo MISSING)"
}

setup_system() {
  local pkgs=(bubblewrap git)
  local missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "[setup] system packages present: ${pkgs[*]}"
  elif [[ "$(id -u)" == "0" ]]; then
    echo "[setup] apt-get install ${missing[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed"
  else
    die "missing Debian packages: ${missing[*]} (run as root: sudo bash setup.sh system)"
  fi
  printf '{"system": {"bwrap": "%s", "git": "%s"}}\n' "$(bwrap --version 2>/dev/null | head -1)" "$(git --version)"
}

# --- docker: a Docker engine and the offline base image (docs/sandbox.md "Docker backend") ---------
# Installs docker.io + debootstrap, starts dockerd when none answers (without touching the host
# network: no bridge, no iptables; log state/logs/dockerd.log, pid state/docker/dockerd.pid, stop it
# with `bash setup.sh docker-stop`), then builds the base image lts/base:bookworm offline from the
# Debian mirror apt is configured with (debootstrap + docker import). Skips whatever already exists.
DOCKER_BASE_IMAGE="${LTS_DOCKER_BASE_IMAGE:-lts/base:bookworm}"
DOCKER_BASE_PACKAGES="python3,python3-pytest,git,patch,procps,tmux"  # tmux: Harbor's terminus-2 agent (run.sh eval)
DOCKERD_PIDFILE="$ROOT/state/docker/dockerd.pid"

debian_mirror() {  # the first non-security Debian URI apt uses (LTS_DEBIAN_MIRROR overrides)
  if [[ -n "${LTS_DEBIAN_MIRROR:-}" ]]; then echo "$LTS_DEBIAN_MIRROR"; return; fi
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } \
    | awk '/^URIs:/ {print $2} /^deb / {for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) {print $i; break}}' \
    | { grep -v security || true; } | head -1
}

setup_docker() {
  [[ "$(id -u)" == "0" ]] || die "setup.sh docker needs root (apt-get install, dockerd)"
  local missing=() p
  for p in docker.io debootstrap; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "[setup] apt-get install ${missing[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed"
  fi
  if docker info >/dev/null 2>&1; then
    echo "[setup] a Docker engine answers ($(docker info --format '{{.ServerVersion}}'))"
  else
    mkdir -p "$ROOT/state/logs" "$ROOT/state/docker"
    echo "[setup] starting dockerd (log state/logs/dockerd.log)"
    setsid dockerd --pidfile "$DOCKERD_PIDFILE" --bridge=none --iptables=false --ip6tables=false \
      --ip-forward=false --ip-masq=false --userland-proxy=false >>"$ROOT/state/logs/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || die "dockerd did not answer within 30 s; see state/logs/dockerd.log"
  fi
  local mirror key
  mirror="$(debian_mirror)"
  [[ -n "$mirror" ]] || die "no Debian mirror found in /etc/apt/sources.list* (set LTS_DEBIAN_MIRROR)"
  key="$(printf '%s\n' "$mirror" bookworm minbase "$DOCKER_BASE_PACKAGES" | sha256sum | cut -c1-16)"
  if [[ "$(docker image inspect -f '{{index .Config.Labels "lts.base.key"}}' "$DOCKER_BASE_IMAGE" 2>/dev/null)" == "$key" ]]; then
    echo "[setup] base image $DOCKER_BASE_IMAGE is up to date"
  else
    local rootfs; rootfs="$(mktemp -d /tmp/lts-rootfs.XXXXXX)"
    echo "[setup] building $DOCKER_BASE_IMAGE offline: debootstrap bookworm from $mirror (about a minute)"
    debootstrap --variant=minbase --include="$DOCKER_BASE_PACKAGES" bookworm "$rootfs" "$mirror" \
      >"$ROOT/state/logs/debootstrap.log" 2>&1 || { rm -rf "$rootfs"; die "debootstrap failed; see state/logs/debootstrap.log"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import --change "LABEL lts.base.key=$key" --change 'CMD ["/bin/bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$DOCKER_BASE_IMAGE" >/dev/null \
      || { rm -rf "$rootfs"; die "docker import failed"; }
    rm -rf "$rootfs"
  fi
  printf '{"docker": {"server": "%s", "base_image": "%s", "python": "%s"}}\n' "$(docker info --format '{{.ServerVersion}}')" \
    "$DOCKER_BASE_IMAGE" "$(docker run --rm --network none "$DOCKER_BASE_IMAGE" python3 -c 'import platform, pytest; print(platform.python_version())')"
}

docker_stop() {  # stops the dockerd that `setup.sh docker` started (never another one)
  if [[ -f "$DOCKERD_PIDFILE" ]] && kill -0 "$(cat "$DOCKERD_PIDFILE")" 2>/dev/null; then
    local pid; pid="$(cat "$DOCKERD_PIDFILE")"
    kill "$pid"; for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    echo "[setup] dockerd ($pid) stopped"
  else
    echo "[setup] no dockerd started by setup.sh is running"
  fi
}

# --- harbor: Harbor's own runner in .venv-harbor (Python >= 3.12), to check our sandboxes from outside ---
setup_harbor() {
  local venv="$ROOT/.venv-harbor" want py
  want="$(cat requirements/harbor.txt pyproject.toml | sha256sum | cut -c1-16)"
  if [[ -f "$venv/.lts-installed" && "$(cat "$venv/.lts-installed")" == "$want" ]]; then
    echo "[setup] .venv-harbor is up to date"
  else
    py="${PYTHON312:-}"
    for c in "$py" "$HOME/.pyenv/versions/3.12.1/bin/python3.12" python3.13 python3.12; do
      if [[ -n "$c" ]] && "$c" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then py="$c"; break; fi
      py=""
    done
    [[ -n "$py" ]] || die "Harbor needs Python >= 3.12 (set PYTHON312=/path/to/python3.12)"
    [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
    echo "[setup] installing requirements/harbor.txt into .venv-harbor (Harbor, ~470 MB)"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -r requirements/harbor.txt || die "pip install -r requirements/harbor.txt failed"
    "$venv/bin/python" -m pip install -q --no-deps -e . || die "could not install the project into .venv-harbor"
    echo "$want" > "$venv/.lts-installed"
  fi
  printf '{"venv": ".venv-harbor", "harbor": "%s"}\n' \
    "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("harbor"))' 2>/dev/null || echo MISSING)"
}

# --- rock: a real ROCK admin in .venv-rock (Python 3.11), for services/sandbox/rock_local and tests/rockhost ---
setup_rock() {
  local venv="$ROOT/.venv-rock" want py="" c
  want="$(cat requirements/rock.txt | sha256sum | cut -c1-16)"
  if [[ -f "$venv/.lts-installed" && "$(cat "$venv/.lts-installed")" == "$want" ]]; then
    echo "[setup] .venv-rock is up to date"
  else
    for c in "${PYTHON311:-}" python3.11 "$HOME/.pyenv/versions/3.11.7/bin/python3.11"; do
      if [[ -n "$c" ]] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 11)' >/dev/null 2>&1; then py="$c"; break; fi
    done
    [[ -n "$py" ]] || die "rl-rock[admin] needs Python 3.11 (set PYTHON311=/path/to/python3.11)"
    [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
    echo "[setup] installing requirements/rock.txt into .venv-rock (ROCK admin + Ray, ~1 GB)"
    "$venv/bin/python" -m pip install -q --no-deps -r requirements/rock.txt || die "pip install -r requirements/rock.txt failed"
    echo "$want" > "$venv/.lts-installed"
  fi
  printf '{"venv": ".venv-rock", "rl-rock": "%s"}\n' \
    "$("$venv/bin/python" -c 'import importlib.metadata as m, rock.admin.main; print(m.version("rl-rock"))' 2>/dev/null || echo MISSING)"
}

# --- sandbox host check: can the local sandbox backend (bubblewrap in user namespaces) run here? -------
# Runs the same namespace set-up the sandbox manager uses (services/sandbox/local), before anything
# is installed, and names the fix when it fails. LTS_SKIP_SANDBOX_CHECK=1 skips it (docker/ROCK sandboxes).
check_sandbox_host() {
  if [[ "${LTS_SKIP_SANDBOX_CHECK:-0}" == "1" ]]; then echo "[setup] sandbox host check skipped (LTS_SKIP_SANDBOX_CHECK=1)"; return 0; fi
  local use="the local sandbox backend needs it; with docker or ROCK sandboxes set LTS_SKIP_SANDBOX_CHECK=1"
  command -v bwrap >/dev/null 2>&1 || die "bubblewrap is not installed: run 'sudo bash setup.sh system' (or 'sudo apt-get install bubblewrap') ($use)"
  command -v unshare >/dev/null 2>&1 || die "unshare (util-linux) is not installed: run 'sudo apt-get install util-linux' ($use)"
  local probe=(bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --ro-bind / / true) err
  if [[ "$(id -u)" != "0" ]]; then
    probe=(unshare --user --map-root-user --mount --propagation private bwrap --unshare-all --unshare-user --disable-userns --cap-drop ALL --ro-bind / / true)
  fi
  if err="$("${probe[@]}" 2>&1)"; then
    echo "[setup] sandbox host check passed ($([[ "$(id -u)" == "0" ]] && echo "root: bubblewrap + cgroups" || echo "non-root: bubblewrap in a user namespace, no cgroup limits"))"
    return 0
  fi
  local fix="use docker sandboxes (sudo bash setup.sh docker; python configure.py --sandbox-backend docker; LTS_SKIP_SANDBOX_CHECK=1)"
  [[ "$(id -u)" == "0" ]] || fix="run as root (sudo bash setup.sh all), or $fix"
  if [[ "$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>/dev/null)" == "1" ]]; then
    fix="Ubuntu >= 23.10 blocks unprivileged user namespaces (AppArmor): sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (keep it: echo kernel.apparmor_restrict_unprivileged_userns=0 | sudo tee /etc/sysctl.d/60-userns.conf), or $fix"
  elif [[ "$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null)" == "0" ]]; then
    fix="unprivileged user namespaces are off: sudo sysctl -w kernel.unprivileged_userns_clone=1, or $fix"
  elif [[ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null)" == "0" ]]; then
    fix="user namespaces are disabled: sudo sysctl -w user.max_user_namespaces=15000, or $fix"
  elif [[ -f /.dockerenv || -f /run/.containerenv ]]; then
    fix="inside a container, namespaces need a privileged container (docker run --privileged, or --security-opt seccomp=unconfined --security-opt apparmor=unconfined), or $fix"
  fi
  die "the sandbox host check failed: '${probe[*]}' says: ${err:-nothing}. Fix: $fix"
}

case "${1:-}" in
  control) setup_control ;;
  runtime) setup_runtime ;;
  system) setup_system ;;
  agent) setup_agent ;;
  docker) setup_docker ;;
  check) check_sandbox_host ;;
  harbor) setup_harbor ;;
  rock) setup_rock ;;
  docker-stop) docker_stop ;;
  all)
    if [[ "$(id -u)" == "0" ]]; then setup_system; else echo "[setup] not root: skipping system packages (run: sudo bash setup.sh system)"; fi
    check_sandbox_host
    setup_control; setup_runtime; setup_agent ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
