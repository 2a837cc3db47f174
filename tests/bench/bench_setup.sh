#!/usr/bin/env bash
# A new user's first `make synth`: a fresh clone of this checkout's HEAD, timed end to end
# (install-synth, cdk synth, review). Package caches stay warm, as on a machine that has
# installed Python and npm packages before. Usage: bench_setup.sh [RUNS]
set -euo pipefail
runs="${1:-2}"
src="$(cd "$(dirname "$0")/../.." && pwd)"
for i in $(seq "$runs"); do
  work="$(mktemp -d)"
  git clone --quiet "$src" "$work/clone"
  start=$(date +%s)
  (cd "$work/clone" && make synth > "$work/synth.log" 2>&1) || { tail -20 "$work/synth.log"; exit 1; }
  echo "run $i: first make synth $(( $(date +%s) - start )) s ($(tail -n 1 "$work/synth.log" | cut -c1-60)...)"
  rm -rf "$work"
done
