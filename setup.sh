#!/usr/bin/env bash
# Set up the project's Python environments (idempotent; safe to re-run). Installs go through uv (pinned in
# requirements/uv.txt, put in .uv/ from PyPI at the first run): a fresh machine needs about a minute, not minutes.
#
#   bash setup.sh control   # .venv-control: tinker SDK, tinker-cookbook, rl-rock, sandbox manager, recipes, tests
#                           #   report: .venv-control/import-check.json
#   bash setup.sh runtime [--gpu-check]
#                           # .venv-runtime: torch, transformers, peft, FastAPI backend + the tiny default model.
#                           #   On a GPU host whose Python already has torch it INHERITS that stack
#                           #   (--system-site-packages), adds only what is missing, and fails if a protected package
#                           #   (torch, vllm, triton, CUDA libs: LTS_PROTECTED_PACKAGES) changed version or path.
#                           #   --gpu-check: a small CUDA check on the visible GPU (fails on a host without one).
#                           #   report: .venv-runtime/setup-public-runtime.json
#   bash setup.sh agent     # .venv-agent: mini-swe-agent (unmodified) for agents inside sandboxes (docs/modelservice.md)
#   bash setup.sh system    # Debian packages the sandboxes need (bubblewrap, ...); needs root
#   bash setup.sh all       # system (if root) + sandbox host check + control + runtime + agent, each phase timed
#   bash setup.sh check     # can the local sandboxes (bubblewrap, user namespaces) run here? says the fix if not
#   bash setup.sh docker    # docker.io + dockerd (if none runs) + the offline base image (root; docker-stop stops it)
#   bash setup.sh harbor    # .venv-harbor: Harbor's own runner (Python 3.12), an outside check of the sandboxes
#   bash setup.sh rock      # .venv-rock: a real ROCK admin (rl-rock[admin], Python 3.11) for tests/rockhost (docs/sandbox.md)
#
# Each step ends with a JSON report of what is installed and whether it imports. docs/setup.md has the details.
# Environment: PYTHON (interpreter for the venvs: 3.11-3.13; default python3.11), LTS_TORCH_INDEX (torch build:
# auto | URL | pypi | none, see install_torch), LTS_SKIP_MODEL=1 (no tiny model), LTS_SKIP_SANDBOX_CHECK=1,
# LTS_INHERIT (runtime over the base Python's torch: auto | 1 | 0), LTS_PROTECTED_PACKAGES, LTS_WHEELS (install
# offline from this folder of wheels alone), LTS_RUNTIME_EXTRA (more requirement files for .venv-runtime),
# UV_CACHE_DIR (uv's cache; default ~/.cache/uv) and uv's other UV_* settings.
set -euo pipefail
cd "$(dirname "$0")"
ROOT="$(pwd)"
T_START=$SECONDS

usage() { awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; }

die() { echo "setup.sh: error: $*" >&2; exit 1; }

phase() {  # phase NAME CMD...: a progress line before, and one with its time after
  local name="$1" t0=$SECONDS; shift
  echo "[setup] >> $name"
  "$@"
  echo "[setup] << $name: $((SECONDS - t0)) s (set-up so far: $((SECONDS - T_START)) s)"
}

find_python() {  # prints the absolute path of an interpreter 3.11-3.13
  local cand="${PYTHON:-}" c
  if [[ -z "$cand" ]]; then
    for c in python3.11 "$HOME/.pyenv/versions/3.11.7/bin/python3.11" python3.12 python3.13 python3; do
      if command -v "$c" >/dev/null 2>&1; then cand="$c"; break; fi
    done
  fi
  [[ -n "$cand" ]] || die "no Python found: install Python 3.11, 3.12 or 3.13 (Debian/Ubuntu: apt-get install python3 python3-pip), or set PYTHON=/path/to/python3"
  local ver
  ver="$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || die "$cand does not run"
  case "$ver" in
    3.11|3.12|3.13) ;;
    *) die "$cand is Python $ver; this project supports Python 3.11-3.13 (set PYTHON=/path/to/python3.11)";;
  esac
  "$cand" -c 'import sys; print(sys.executable)'
}

# --- uv: the installer (requirements/uv.txt), put in .uv/ by the interpreter's own pip ---------------------
UV=""
UV_IDX=()   # pip's configured index-url / find-links (pip.conf, PIP_* variables), passed on: uv does not read pip.conf
ensure_uv() {
  [[ -z "$UV" ]] || return 0
  local want c py
  want="$(sed -n -E 's/^uv==([^ ]+).*/\1/p' requirements/uv.txt)"
  for c in "${LTS_UV:-}" "$ROOT/.uv/bin/uv"; do
    if [[ -n "$c" && -x "$c" && "$("$c" --version 2>/dev/null | awk '{print $2}')" == "$want" ]]; then UV="$c"; break; fi
  done
  py="$(find_python)"
  if [[ -z "$UV" ]]; then
    echo "[setup] installing uv $want (requirements/uv.txt) into .uv/"
    rm -rf "$ROOT/.uv"
    local pipargs=(install -q --disable-pip-version-check --no-warn-script-location --root-user-action=ignore)
    [[ -z "${LTS_WHEELS:-}" ]] || pipargs+=(--no-index --find-links "$LTS_WHEELS")
    if "$py" -m pip --version >/dev/null 2>&1; then
      "$py" -m pip "${pipargs[@]}" --target "$ROOT/.uv" -r requirements/uv.txt || die "could not install uv with $py -m pip (see above)"
    else  # no pip in this Python: a small venv (ensurepip) holds uv
      "$py" -c 'import venv, ensurepip' 2>/dev/null \
        || die "$py has neither pip nor venv/ensurepip: run 'sudo apt-get install python3-pip' (or python3-venv), then re-run"
      "$py" -m venv "$ROOT/.uv/venv" && "$ROOT/.uv/venv/bin/python" -m pip "${pipargs[@]}" -r requirements/uv.txt \
        || die "could not install uv into .uv/venv"
      mkdir -p "$ROOT/.uv/bin" && ln -sf ../venv/bin/uv "$ROOT/.uv/bin/uv"
    fi
    UV="$ROOT/.uv/bin/uv"
    [[ -x "$UV" ]] || die "uv was installed but $UV is missing"
  fi
  # no bytecode for every file at install time (UV_COMPILE_BYTECODE=1 does that, as pip does: +100 s of CPU on 2
  # cores); the import checks below write the .pyc of what the project imports (report: PYTHONDONTWRITEBYTECODE unset)
  export UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
  if [[ -n "${LTS_WHEELS:-}" ]]; then
    UV_IDX=(--offline --no-index --find-links "$LTS_WHEELS")
  else
    local key val v
    while read -r key val; do
      for v in $val; do
        case "$key" in
          find-links) UV_IDX+=(--find-links "$v") ;;
          index-url) UV_IDX+=(--index-url "$v") ;;
        esac
      done
    done < <("$py" -m pip config list 2>/dev/null | sed -n -E "s/^[^.]*\.(find-links|index-url)='(.*)'$/\1 \2/p" | sort -u)
  fi
}

uvpip() {  # uvpip VENV_PYTHON ARGS...: uv pip install into that environment, with pip's index settings
  local vpy="$1"; shift
  "$UV" pip install -q --python "$vpy" "${UV_IDX[@]}" "$@"
}

# --- torch: which build (docs: README "What set-up installs") ----------------------------------------
# LTS_TORCH_INDEX picks where torch comes from:
#   unset (auto)  GPU host (nvidia-smi lists a GPU): the default index (PyPI), whose Linux torch is the CUDA build.
#                 No GPU: a CPU build: the one the configured index / find-links already offer (a local
#                 wheel/mirror "+cpu" build), else the PyTorch CPU index https://download.pytorch.org/whl/cpu
#                 (about 200 MB instead of several GB).
#   URL           that index (e.g. https://download.pytorch.org/whl/cu128 for another CUDA version, or a mirror)
#   pypi          whatever the configured index gives (on x86 Linux: the CUDA build)
#   none          no torch at all (control environment only; nothing that imports torch will work)
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }

install_torch() {  # install_torch VENV_PYTHON PIN
  local vpy="$1" pin="$2" choice="${LTS_TORCH_INDEX:-auto}" picked have
  have="$("$vpy" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
  if [[ -n "$have" && "${have%%+*}" == "${pin#torch==}" ]]; then echo "[setup] torch $have is installed"; return 0; fi
  case "$choice" in
    none) echo "[setup] LTS_TORCH_INDEX=none: not installing torch"; return 0 ;;
    pypi) echo "[setup] installing $pin from the configured index (LTS_TORCH_INDEX=pypi)"
          uvpip "$vpy" "$pin" || die "could not install $pin from the configured index"; return 0 ;;
    auto) ;;
    *) echo "[setup] installing $pin from $choice (LTS_TORCH_INDEX)"
       "$UV" pip install -q --python "$vpy" --index-url "$choice" "$pin" \
         || die "could not install $pin from $choice (LTS_TORCH_INDEX): check the URL, or unset it for the automatic choice"
       return 0 ;;
  esac
  if has_gpu; then
    echo "[setup] GPU found (nvidia-smi): installing $pin from the index (the CUDA build; set LTS_TORCH_INDEX to choose another)"
    uvpip "$vpy" "$pin" || die "could not install $pin (set LTS_TORCH_INDEX=<index URL> for a mirror)"
    return 0
  fi
  if [[ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]]; then  # PyPI's torch for other platforms is the CPU build
    echo "[setup] no GPU ($(uname -s)/$(uname -m)): installing $pin from the index (a CPU build there)"
    uvpip "$vpy" "$pin" || die "could not install $pin"
    return 0
  fi
  picked="$("$UV" pip install --dry-run --no-deps --python "$vpy" "${UV_IDX[@]}" "$pin" 2>&1 | sed -n -E 's/^ \+ torch==(.*)$/\1/p' | head -1)"
  if [[ "$picked" == *+cpu ]]; then
    echo "[setup] no GPU: installing torch $picked (a CPU build the configured index or find-links offer)"
    uvpip "$vpy" "$pin" || die "could not install $pin"
  else
    echo "[setup] no GPU: installing $pin as the CPU build from $TORCH_CPU_INDEX (the configured index offers ${picked:-nothing}, a CUDA build)"
    "$UV" pip install -q --python "$vpy" --index-url "$TORCH_CPU_INDEX" "$pin" \
      || die "could not install the CPU build of $pin from $TORCH_CPU_INDEX. Set LTS_TORCH_INDEX to a reachable index or mirror that has it, or LTS_TORCH_INDEX=pypi to take the default (CUDA) build, several GB"
  fi
}

venv_stamp() {  # venv_stamp REQUIREMENTS EXTRA...: what an environment was installed from
  (cat "$1" pyproject.toml requirements/uv.txt; shift; echo "$*"; [[ -z "${LTS_TORCH_INDEX:-}" ]] || echo "torch:$LTS_TORCH_INDEX") \
    | sha256sum | cut -c1-16
}

# make_venv NAME REQUIREMENTS: a venv made by uv (pip seeded in it), the pinned requirements, the project (editable)
make_venv() {
  local name="$1" req="$2" py venv stamp want
  venv="$ROOT/.venv-$name"
  stamp="$venv/.lts-installed"
  want="$(venv_stamp "$req")"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
    echo "[setup] .venv-$name is up to date ($req unchanged)"
    return 0
  fi
  ensure_uv
  py="$(find_python)"
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "[setup] creating .venv-$name with $py"
    "$UV" venv -q --seed --python "$py" "$venv" || die "uv venv $venv failed"
  fi
  echo "[setup] installing $req into .venv-$name"
  # torch first and alone, pinned, so that no other package can pull a different (CUDA) build
  local torch_pin
  torch_pin="$(grep -E '^torch==' "$req" || true)"
  [[ -z "$torch_pin" ]] || install_torch "$venv/bin/python" "$torch_pin"
  if [[ "${LTS_TORCH_INDEX:-}" == "none" ]]; then  # the requirements are a full lock: install it without torch
    grep -vE '^torch==' "$req" > "$venv/.requirements-no-torch.txt"
    uvpip "$venv/bin/python" --no-deps -r "$venv/.requirements-no-torch.txt" || die "uv pip install -r $req (without torch) failed"
  else
    uvpip "$venv/bin/python" -r "$req" || die "uv pip install -r $req failed (see the messages above)"
  fi
  uvpip "$venv/bin/python" --no-deps -e . || die "could not install the project into .venv-$name"
  echo "$want" > "$stamp"
}

report() {  # report NAME OUT_JSON MODULE...: import check, printed and written to OUT_JSON, with the
  local name="$1" out="$2"; shift 2  # sections set-up left in .venv-NAME/.setup-*.json merged in
  env -u PYTHONDONTWRITEBYTECODE "$ROOT/.venv-$name/bin/python" - "$name" "$out" "$@" <<'EOF'
import glob, importlib, json, os, platform, sys
name, out, mods = sys.argv[1], sys.argv[2], sys.argv[3:]
if os.environ.get("LTS_TORCH_INDEX") == "none":  # set up without torch on purpose
    mods = [m for m in mods if m != "torch"]
rep = {"venv": f".venv-{name}", "python": platform.python_version(), "executable": sys.executable,
       "system_site_packages": sys.prefix != sys.base_prefix and any(p.startswith(sys.base_prefix) and "-packages" in p
                                                                      for p in sys.path),
       "ok": True, "packages": {}}
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
    rep["torch_path"] = os.path.dirname(torch.__file__)
except Exception:
    pass
for part in sorted(glob.glob(os.path.join(os.path.dirname(out), ".setup-*.json"))):
    key = os.path.basename(part)[len(".setup-"):-len(".json")].replace("-", "_")
    with open(part) as f:
        rep[key] = json.load(f)
    if isinstance(rep[key], dict) and rep[key].get("ok") is False:
        rep["ok"] = False
with open(out, "w") as f:
    json.dump(rep, f, indent=1)
print(json.dumps(rep, indent=1))
sys.exit(0 if rep["ok"] else 1)
EOF
}

setup_control() {
  local rep="$ROOT/.venv-control/import-check.json"
  if [[ -f "$rep" && "$(cat "$ROOT/.venv-control/.lts-installed" 2>/dev/null)" == "$(venv_stamp requirements/control.txt)" ]] \
     && grep -q '"ok": true' "$rep" && [[ "$rep" -nt "$ROOT/.venv-control/.lts-installed" ]]; then
    echo "[setup] .venv-control is up to date and passed its import check (.venv-control/import-check.json)"
    return 0
  fi
  make_venv control requirements/control.txt
  report control "$ROOT/.venv-control/import-check.json" tinker tinker_cookbook torch transformers rock docker fastapi uvicorn httpx yaml pytest matplotlib services.common cookbook \
    || die "control environment check failed (see the report above: .venv-control/import-check.json)"
}

# --- runtime: its own stack, or the GPU image's inherited ------------------------------------------------
# Protected packages (shell patterns over distribution names): an inherited runtime must leave their version and
# path as the base Python has them. LTS_PROTECTED_PACKAGES replaces the list.
PROTECTED_DEFAULT="torch torchvision torchaudio triton vllm xformers flashinfer* flash-attn transformer-engine* megatron-core apex deepspeed nvidia-* cuda-* cupy-*"

protected_snapshot() {  # protected_snapshot PYTHON: {name: {version, path}} of the protected packages it imports
  "$1" - "${LTS_PROTECTED_PACKAGES:-$PROTECTED_DEFAULT}" <<'EOF'
import fnmatch, importlib.metadata as md, json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
pats = [norm(p) for p in sys.argv[1].split()]
seen = {}
for d in md.distributions():  # in sys.path order: the first of a name is the one imported
    name = norm(d.metadata["Name"] or "")
    if name and name not in seen and any(fnmatch.fnmatch(name, p) for p in pats):
        seen[name] = {"version": d.version, "path": str(d.locate_file(""))}
print(json.dumps(seen, sort_keys=True))
EOF
}

runtime_extras() {  # the GPU kernels on a GPU host, then LTS_RUNTIME_EXTRA's files, into .venv-runtime (no deps)
  local vpy="$ROOT/.venv-runtime/bin/python" f
  if has_gpu; then
    echo "[setup] GPU found: installing requirements/gpu.txt (Liger fused training kernels) into .venv-runtime"
    uvpip "$vpy" --no-deps -r requirements/gpu.txt || die "uv pip install -r requirements/gpu.txt failed"
  fi
  for f in ${LTS_RUNTIME_EXTRA:-}; do
    [[ -f "$f" ]] || die "LTS_RUNTIME_EXTRA: no such requirements file: $f"
    echo "[setup] installing $f into .venv-runtime (LTS_RUNTIME_EXTRA)"
    uvpip "$vpy" --no-deps -r "$f" || die "uv pip install -r $f failed"
  done
}

setup_runtime_inherit() {  # setup_runtime_inherit BASE_PYTHON
  local base="$1" venv="$ROOT/.venv-runtime" req=requirements/runtime.txt before
  echo "[setup] .venv-runtime inherits $base's stack ($("$base" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "no torch"))"
  ensure_uv
  before="$(protected_snapshot "$base")" || die "could not list $base's packages"
  if [[ ! -x "$venv/bin/python" ]]; then
    "$UV" venv -q --system-site-packages --python "$base" "$venv" || die "uv venv --system-site-packages failed"
  fi
  grep -q '^include-system-site-packages = true' "$venv/pyvenv.cfg" \
    || die ".venv-runtime exists without the base's site-packages: remove it (rm -rf .venv-runtime) and re-run"
  # a base that is itself a venv (a GPU image's /opt/.../.venv): --system-site-packages reaches only the interpreter
  # under it, so its site-packages are listed in a .pth too (after the runtime's own, before the system's)
  "$base" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/lts-base-site.pth" \
    || die "could not list $base's site-packages"
  # the lock minus what the base has (at any version: the image's stack wins; the differences are recorded) and
  # minus LTS_RUNTIME_SKIP (names of packages not wanted here, e.g. ray where the Ray runtime is not used)
  "$base" - "$req" "${LTS_RUNTIME_SKIP:-}" "$venv/.setup-inherited.json" > "$venv/.requirements-inherit.txt" <<'EOF' || die "could not filter $req"
import importlib.metadata as md, json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
skip = {norm(n) for n in sys.argv[2].split()}
have = {}
for d in md.distributions():
    have.setdefault(norm(d.metadata["Name"] or ""), d.version)
rec = {"kept_from_base": {}, "skipped": sorted(skip), "added": {}}
for line in open(sys.argv[1]):
    m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
    if not m:
        continue
    name, pin = norm(m.group(1)), m.group(2)
    if name in skip:
        print(f"# skipped (LTS_RUNTIME_SKIP): {line.strip()}")
    elif name in have:
        print(f"# kept from the base: {line.strip()} (base: {have[name]})")
        rec["kept_from_base"][name] = {"pinned": pin, "base": have[name]}
    else:
        print(line.strip())
        rec["added"][name] = pin
json.dump(rec, open(sys.argv[3], "w"), indent=1)
EOF
  echo "[setup] adding $(grep -cv '^#' "$venv/.requirements-inherit.txt") of $(grep -c '==' "$req") pinned packages (the rest come from the base$([[ -z "${LTS_RUNTIME_SKIP:-}" ]] || echo "; skipped: $LTS_RUNTIME_SKIP"))"
  uvpip "$venv/bin/python" --no-deps -r "$venv/.requirements-inherit.txt" || die "uv pip install (inherited runtime) failed"
  # the project by a .pth file (what an editable install amounts to here): no build backend needed, works offline
  "$venv/bin/python" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/lts-project.pth", "w").write(sys.argv[1] + "\n")' "$ROOT" \
    || die "could not add the project to .venv-runtime"
  runtime_extras
  local after
  after="$(protected_snapshot "$venv/bin/python")"
  "$base" - "$before" "$after" "${LTS_PROTECTED_PACKAGES:-$PROTECTED_DEFAULT}" "$base" > "$venv/.setup-protected.json" <<'EOF'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
changed = {n: {"before": before.get(n), "after": after.get(n)} for n in sorted(set(before) | set(after))
           if before.get(n) != after.get(n)}
print(json.dumps({"ok": not changed, "base_python": sys.argv[4], "patterns": sys.argv[3].split(),
                  "before": before, "after": after, "changed": changed}, indent=1))
EOF
  if ! grep -q '"ok": true' "$venv/.setup-protected.json"; then
    report runtime "$venv/setup-public-runtime.json" torch >/dev/null 2>&1 || true
    die "a protected package of the base changed in .venv-runtime: $("$base" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["changed"]))' "$venv/.setup-protected.json") (before/after: .venv-runtime/setup-public-runtime.json). Remove what replaced it, or rm -rf .venv-runtime and re-run"
  fi
  echo "[setup] protected packages unchanged: $("$base" -c 'import json, sys; print(", ".join("%s %s" % (k, v["version"]) for k, v in json.load(open(sys.argv[1]))["after"].items()) or "none present")' "$venv/.setup-protected.json")"
}

gpu_check() {  # a small CUDA check on the visible GPU, recorded in .venv-runtime/.setup-gpu-check.json
  local out="$ROOT/.venv-runtime/.setup-gpu-check.json"
  "$ROOT/.venv-runtime/bin/python" - > "$out" <<'EOF' || true
import json, os, time
rep = {"ok": False, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
try:
    import torch
    rep.update(torch=torch.__version__, torch_cuda_build=torch.version.cuda)
    if not torch.cuda.is_available():
        rep["error"] = (f"no CUDA GPU is visible to torch {torch.__version__} (built for CUDA {torch.version.cuda}): "
                        "--gpu-check needs a GPU host (check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES)")
    else:
        t0 = time.perf_counter()
        a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
        got = (a @ a).float().cpu()
        torch.cuda.synchronize()
        ref = a.float().cpu() @ a.float().cpu()
        err = float((got - ref).abs().max() / ref.abs().max())
        p = torch.cuda.get_device_properties(0)
        rep.update(ok=err < 0.05, device=p.name, device_count=torch.cuda.device_count(),
                   capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2**30, 1),
                   bf16_matmul_rel_err=round(err, 5), seconds=round(time.perf_counter() - t0, 3))
        if err >= 0.05:
            rep["error"] = f"bf16 matmul on the GPU disagrees with the CPU (relative error {err:.3g})"
except Exception as e:  # noqa: BLE001
    rep["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(rep, indent=1))
EOF
  if grep -q '"ok": true' "$out"; then
    echo "[setup] GPU check passed: $(sed -n -E 's/^ "device": "(.*)",?$/\1/p' "$out")"
  else
    report runtime "$ROOT/.venv-runtime/setup-public-runtime.json" >/dev/null 2>&1 || true
    die "GPU check failed: $(sed -n -E 's/^ "error": "(.*)",?$/\1/p' "$out") (report: .venv-runtime/setup-public-runtime.json)"
  fi
}

setup_runtime() {  # setup_runtime [--gpu-check]
  local gpu_check_wanted=0 a inherit="${LTS_INHERIT:-auto}" base
  for a in "$@"; do
    case "$a" in
      --gpu-check) gpu_check_wanted=1 ;;
      *) die "setup.sh runtime: unknown option '$a' (only --gpu-check)" ;;
    esac
  done
  base="$(find_python)"
  case "$inherit" in
    auto) if has_gpu && "$base" -c 'import torch' >/dev/null 2>&1; then inherit=1; else inherit=0; fi ;;
    1|0) ;;
    *) die "LTS_INHERIT must be auto, 1 or 0 (not '$inherit')" ;;
  esac
  rm -f "$ROOT"/.venv-runtime/.setup-*.json
  if [[ "$inherit" == 1 ]]; then
    "$base" -c 'import torch' 2>/dev/null || die "LTS_INHERIT=1: $base has no torch to inherit (set PYTHON to the image's Python)"
    setup_runtime_inherit "$base"
  else
    local rep="$ROOT/.venv-runtime/setup-public-runtime.json"
    if [[ -f "$rep" && "$(cat "$ROOT/.venv-runtime/.lts-installed" 2>/dev/null)" == "$(venv_stamp requirements/runtime.txt)" ]] \
       && grep -q '"ok": true' "$rep" && [[ "$rep" -nt "$ROOT/.venv-runtime/.lts-installed" && "$gpu_check_wanted" == 0 ]] \
       && ! has_gpu && [[ -z "${LTS_RUNTIME_EXTRA:-}" && -f models/qwen3-tiny-xs/config.json ]]; then
      echo "[setup] .venv-runtime is up to date and passed its import check (.venv-runtime/setup-public-runtime.json)"
      return 0
    fi
    make_venv runtime requirements/runtime.txt
    if has_gpu || [[ -n "${LTS_RUNTIME_EXTRA:-}" ]]; then ensure_uv; runtime_extras; fi
  fi
  [[ "$gpu_check_wanted" == 0 ]] || gpu_check
  report runtime "$ROOT/.venv-runtime/setup-public-runtime.json" torch transformers peft fastapi uvicorn tinker safetensors yaml services.backend \
    || die "runtime environment check failed (see the report above: .venv-runtime/setup-public-runtime.json)"
  if [[ "${LTS_SKIP_MODEL:-0}" != "1" ]]; then
    if [[ -f models/qwen3-tiny-xs/config.json && -d hf-home/hub/models--local--qwen3-tiny-xs ]]; then
      echo "[setup] tiny default model present: models/qwen3-tiny-xs (local/qwen3-tiny-xs)"
    else
      echo "[setup] creating the tiny default model (offline, seconds)"
      env -u PYTHONDONTWRITEBYTECODE .venv-runtime/bin/python -m services.models make-tiny --register >/dev/null
      echo "[setup] created models/qwen3-tiny-xs, registered as local/qwen3-tiny-xs in hf-home/"
    fi
  fi
}

setup_agent() {  # .venv-agent (the interpreter the other venvs use; what `python -m cookbook.modelservice install-agent` makes)
  local want; want="$( (cat requirements/agent.txt requirements/uv.txt) | sha256sum | cut -c1-16)"
  if [[ -f .venv-agent/.lts-installed && "$(cat .venv-agent/.lts-installed)" == "$want" ]]; then
    echo "[setup] .venv-agent is up to date"
  else
    ensure_uv
    echo "[setup] installing requirements/agent.txt into .venv-agent (mini-swe-agent)"
    [[ -x .venv-agent/bin/python ]] || "$UV" venv -q --python "$(find_python)" .venv-agent || die "uv venv .venv-agent failed"
    uvpip .venv-agent/bin/python -r requirements/agent.txt || die "could not install requirements/agent.txt into .venv-agent"
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
    mkdir -p "$ROOT/state/logs"   # also when a Docker engine already answered (no dockerd started here)
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
    ensure_uv
    [[ -x "$venv/bin/python" ]] || "$UV" venv -q --seed --python "$py" "$venv" || die "uv venv .venv-harbor failed"
    echo "[setup] installing requirements/harbor.txt into .venv-harbor (Harbor, ~470 MB)"
    uvpip "$venv/bin/python" -r requirements/harbor.txt || die "uv pip install -r requirements/harbor.txt failed"
    uvpip "$venv/bin/python" --no-deps -e . || die "could not install the project into .venv-harbor"
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
    ensure_uv
    [[ -x "$venv/bin/python" ]] || "$UV" venv -q --seed --python "$py" "$venv" || die "uv venv .venv-rock failed"
    echo "[setup] installing requirements/rock.txt into .venv-rock (ROCK admin + Ray, ~1 GB)"
    uvpip "$venv/bin/python" --no-deps -r requirements/rock.txt || die "uv pip install -r requirements/rock.txt failed"
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
  runtime) shift; setup_runtime "$@" ;;
  system) setup_system ;;
  agent) setup_agent ;;
  docker) setup_docker ;;
  check) check_sandbox_host ;;
  harbor) setup_harbor ;;
  rock) setup_rock ;;
  docker-stop) docker_stop ;;
  all)
    if [[ "$(id -u)" == "0" ]]; then phase "system packages" setup_system; else echo "[setup] not root: skipping system packages (run: sudo bash setup.sh system)"; fi
    phase "sandbox host check" check_sandbox_host
    phase "uv" ensure_uv
    phase "control environment (.venv-control)" setup_control
    phase "runtime environment (.venv-runtime) + tiny model" setup_runtime
    phase "agent environment (.venv-agent)" setup_agent
    echo "[setup] all done in $((SECONDS - T_START)) s" ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
