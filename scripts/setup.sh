#!/usr/bin/env bash
# Set up a development environment in .venv.
#   scripts/setup.sh          the tool itself (enough for `gpu-reaper demo`)
#   scripts/setup.sh --test   plus the test dependencies: Debian's Prometheus, VictoriaMetrics,
#                             Alertmanager and Chromium, which the suite starts for real.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; }
want_tests=false
for arg in "$@"; do
  case "$arg" in
    --test) want_tests=true ;;
    -h | --help) usage; exit 0 ;;
    *) echo "setup: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
  esac
done

if $want_tests; then
  packages=(prometheus victoria-metrics prometheus-alertmanager chromium)
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    echo "setup: installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    # The packages' own services are not wanted: tests start private servers on free ports.
    for svc in prometheus prometheus-alertmanager victoria-metrics prometheus-node-exporter; do
      $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || true
    done
  fi
fi

# pip quietly, without the mirror's "WARNING: Location" noise, stopping the setup when pip fails.
pip_install() {
  local out status=0
  out=$(.venv/bin/python -m pip install -q "$@" 2>&1) || status=$?
  grep -v '^WARNING: Location' <<<"$out" || true
  if ((status)); then
    echo "setup: 'pip install $*' failed (exit $status)" >&2
    exit "$status"
  fi
}

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "setup: Python 3.11+ is required" >&2; exit 2; }
[[ -x .venv/bin/python ]] || python3 -m venv .venv
pip_install --upgrade pip
extra=""
$want_tests && extra="[dev]"
pip_install -e ".${extra}"
if $want_tests; then
  # Tests also import the exporter with the oldest NVML binding pyproject.toml allows, kept apart.
  floor=$(sed -n 's/^ *"nvidia-ml-py>=\([0-9.]*\)",*$/\1/p' pyproject.toml)
  if [[ ! -d .venv/oldest-pynvml/nvidia_ml_py-$floor.dist-info ]]; then
    rm -rf .venv/oldest-pynvml
    pip_install --no-deps --target .venv/oldest-pynvml "nvidia-ml-py==$floor"
  fi
fi
.venv/bin/python -c 'import analyzer, exporter, reaper' && echo "setup: ok (.venv)"
