#!/usr/bin/env bash
# Runs every fuzz target (or those named) for RUNS inputs each and prints a table.
#   fuzz/run.sh                      # 1,000,000 inputs per target
#   RUNS=100000 fuzz/run.sh quantity scenario
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain. Runs under
# `nice -n 19`; a crash stops that target, leaves its input in fuzz/artifacts/<target>/ and
# makes the script exit 1. New interesting inputs are added to fuzz/corpus/<target>/.
set -uo pipefail
cd "$(dirname "$0")"
RUNS=${RUNS:-1000000}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(quantity volcano_config scenario pod_dialects crd_specs)

max_len() {
    case $1 in
        quantity) echo 256 ;;
        pod_dialects) echo 2048 ;;
        *) echo 4096 ;;
    esac
}

nice -n 19 cargo +nightly fuzz build || exit 1
mkdir -p logs
status=0
rows=()
for t in "${TARGETS[@]}"; do
    log=logs/$t.log
    dict=()
    [ -f "dicts/$t.dict" ] && dict=(-dict="dicts/$t.dict")
    start=$(date +%s)
    nice -n 19 cargo +nightly fuzz run "$t" -- -runs="$RUNS" -timeout=10 -rss_limit_mb=2048 \
        -max_len="$(max_len "$t")" "${dict[@]}" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    if [ $rc -eq 0 ]; then result=ok; else result="CRASH (see $log)"; status=1; fi
    rows+=("$(printf '| %-15s | %10s | %8s | %6ss | %s |' "$t" "${runs:-?}" "${speed:-?}" "$secs" "$result")")
done
echo
printf '| %-15s | %10s | %8s | %7s | %s |\n' target inputs exec/s time result
echo "|-----------------|------------|----------|---------|--------|"
printf '%s\n' "${rows[@]}"
exit $status
