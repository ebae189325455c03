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

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "setup: Python 3.11+ is required" >&2; exit 2; }
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
extra=""
$want_tests && extra="[dev]"
.venv/bin/python -m pip install -q -e ".${extra}" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import analyzer, exporter, reaper' && echo "setup: ok (.venv)"
