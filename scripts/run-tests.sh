#!/usr/bin/env bash
# The whole suite as two pytest processes side by side, one per core: the launcher and browser tests (real
# processes, mostly waiting on them) beside the planner, renderer, service and benchmark tests (CPU-bound); about
# 12 minutes each on 2 cores. Each keeps its own log; both are printed, and the run fails if either does. Extra
# arguments go to both (e.g. -x, -k EXPR).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PY=${PY:-.venv/bin/python}
logs=$(mktemp -d)
"$PY" -m pytest -q "$@" tests/launcher tests/web > "$logs/processes.log" 2>&1 &
processes=$!
"$PY" -m pytest -q "$@" tests/api tests/service tests/cli tests/planner tests/render tests/benchmarks > "$logs/planner.log" 2>&1 &
planner=$!
wait "$processes"; a=$?
wait "$planner"; b=$?
for part in processes planner; do
    echo "===== tests ($part) ====="
    cat "$logs/$part.log"
done
rm -rf "$logs"
if (( a != 0 || b != 0 )); then
    echo "FAILED: launcher/browser tests exit $a, planner/render/service/benchmark tests exit $b" >&2
    exit 1
fi
