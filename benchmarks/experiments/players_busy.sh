#!/usr/bin/env bash
# Headless players with one core busy, two builds of rtts/play alternating round by round
# (docs/benchmarks.md, "Loudspeakers in step"):
#
#     benchmarks/experiments/players_busy.sh BEFORE AFTER [ROUNDS]
#
# BEFORE and AFTER are commits; each round runs tests/system/test_in_step_across_instances.py's
# players test with rtts/play as of each, beside a Python busy loop, and prints pass or fail
# and the spreads the test reports. rtts/play is put back as HEAD has it at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
before=$1 after=$2 rounds=${3:-7}
python3 -c "while True: pass" &
busy=$!
trap 'kill $busy; git checkout -q HEAD -- rtts/play' EXIT
for round in $(seq "$rounds"); do
  for build in "$before" "$after"; do
    git checkout -q "$build" -- rtts/play
    echo "== round $round, rtts/play of $build, $(date -u +%T) UTC"
    python -m pytest -q -p no:cacheprovider tests/system/test_in_step_across_instances.py -k players -rA 2>&1 \
      | grep -E "^play_at|spread on one|passed|failed" | cut -c1-260 || true
  done
done
