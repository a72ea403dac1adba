#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment, timed, then the acceptance commands run with
# what it installed: `vrambench --sweep seq=512..8192` (the package's command) and a plan from
# Python. Prints the load average before and after, since the time depends on what else runs.
# --fresh-build compiles in a temporary build folder instead of reusing build/pip/.
# Usage: scripts/check-pip-install.sh [--fresh-build]
set -euo pipefail
cd "$(dirname "$0")/.."
fresh=0
for arg in "$@"; do
  case "$arg" in
    --fresh-build) fresh=1 ;;
    *) echo "usage: $0 [--fresh-build]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
pip_args=()
if [ "$fresh" = 1 ]; then pip_args+=(--config-settings="build-dir=$work/build"); fi
echo "check-pip-install: load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
start=$(date +%s)
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pip_args[@]}" .
end=$(date +%s)
echo "check-pip-install: pip install . took $((end - start)) s; load average after:" \
     "$(cut -d' ' -f1-3 /proc/loadavg)"
# Away from the source tree, so that Python imports the installed package.
cd "$work"
"$work/venv/bin/vrambench" --sweep seq=512..8192 --quiet
"$work/venv/bin/python" -c "import vrambench; print(vrambench.plan(model='llama3.2-3b', finetune='qlora', vram='24GiB', seq=2048, target_batch=16))"
echo "check-pip-install: ok"
