#!/usr/bin/env bash
# The accuracy study of docs/RESULTS.md: SmolLM2-135M (suite "long") and Gemma-3-270M
# (suite "gemma"), each a resumable `hikv accuracy run`; prints the wall time of each.
# Usage: benchmarks/accuracy.sh [OUT]   (default OUT=results/accuracy)
# Results: OUT/<model>/iso_table.md (+ CSV/JSON/PNG). Takes hours on 2 CPU cores.
set -euo pipefail
OUT=${1:-results/accuracy}
hikv fetch-assets --gemma
for run in "long smollm2-135m smollm2" "gemma gemma3-270m gemma3"; do
    set -- $run
    start=$(date +%s)
    hikv accuracy run --suite "$1" --model "$2" --out "$OUT/$3"
    echo "accuracy study $2 (suite $1): wall $(( $(date +%s) - start )) s"
done
