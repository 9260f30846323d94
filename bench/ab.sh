#!/usr/bin/env bash
# A/B of two builds of the whole CA: `warrant bench` on SQLite (a fresh temp
# data dir per run, durable), the two binaries run back to back in each
# repetition, alternating which goes first. Prints, per scenario, the median
# certs/s and server CPU per certificate of each build and the median of the
# per-repetition B/A ratios. Not a timed test: run it by hand on a quiet box.
#
#   bench/ab.sh NEW_WARRANT_BINARY          A is the ratchet's baseline
#   bench/ab.sh OLD_WARRANT_BINARY NEW_WARRANT_BINARY
#   REPS=5 SECS=15 AGENTS=64 SCENARIOS=aic,regular bench/ab.sh B
#
# With one binary, A is the commit named in docs/benchmarks/BASELINE (the
# ratchet: changes to issuance or the write path are measured against it, not
# against the commit before them), built once in a git worktree under
# BASELINE_DIR (default ${TMPDIR:-/tmp}/warrant-baseline-<commit>) and reused.
#
# A_ENV / B_ENV: settings for one side only, as NAME=VALUE words (the same
# binary twice with a switch: the log's cost is
#   B_ENV=WARRANT_AUDIT_LOG=false bench/ab.sh target/release/warrant target/release/warrant
# with B the log off).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"

# The release binary of the BASELINE commit, built on first use.
baseline_binary() {
    local commit dir
    commit="$(sed -e 's/#.*//' "$repo/docs/benchmarks/BASELINE" | awk 'NF { print $1; exit }')"
    [ -n "$commit" ] || { echo "no commit in docs/benchmarks/BASELINE" >&2; exit 2; }
    dir="${BASELINE_DIR:-${TMPDIR:-/tmp}/warrant-baseline-$commit}"
    if [ ! -x "$dir/target/release/warrant" ]; then
        [ -d "$dir" ] || git -C "$repo" worktree add --detach "$dir" "$commit" >&2
        (cd "$dir" && cargo build --release -p warrant) >&2
    fi
    echo "$dir/target/release/warrant"
}

case $# in
    1) A="$(baseline_binary)"; B="$1" ;;
    2) A="$1"; B="$2" ;;
    *) echo "usage: $0 [A_BINARY] B_BINARY (A defaults to docs/benchmarks/BASELINE's build)" >&2; exit 2 ;;
esac
REPS="${REPS:-3}"
SECS="${SECS:-15}"
AGENTS="${AGENTS:-64}"
SCENARIOS="${SCENARIOS:-aic,regular}"
read -r -a a_env <<<"${A_ENV:-}"
read -r -a b_env <<<"${B_ENV:-}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
results="$tmp/results.tsv"

echo "Command: bench/ab.sh (warrant bench --scenario S --duration ${SECS}s --agents $AGENTS, REPS=$REPS, scenarios $SCENARIOS)"
echo "A: ${A_ENV:-} $A"
echo "B: ${B_ENV:-} $B"
IFS=',' read -r -a scenarios <<<"$SCENARIOS"
for rep in $(seq 1 "$REPS"); do
    for scenario in "${scenarios[@]}"; do
        order=(A B)
        [ $((rep % 2)) -eq 0 ] && order=(B A)
        for which in "${order[@]}"; do
            bin="$A"
            side_env=("${a_env[@]}")
            [ "$which" = B ] && bin="$B" && side_env=("${b_env[@]}")
            json="$tmp/run.json"
            env "${side_env[@]}" "$bin" bench --scenario "$scenario" --duration "${SECS}s" --agents "$AGENTS" --json >"$json"
            python3 - "$json" "$scenario" "$which" "$rep" >>"$results" <<'EOF'
import json, sys
path, scenario, which, rep = sys.argv[1:]
t = json.load(open(path))["totals"]
cpu = t["cpu_us_per_cert"]
print("\t".join([scenario, which, rep, f'{t["issued_per_sec"]:.1f}',
                 "" if cpu is None else f"{cpu:.1f}", str(t["failures"])]))
EOF
            tail -n1 "$results" | awk -F'\t' '{printf "  rep %s %s %s: %s certs/s, %s µs CPU/cert, %s failures\n", $3, $1, $2, $4, $5, $6}' >&2
        done
    done
done

python3 - "$results" <<'EOF'
import statistics, sys
from collections import defaultdict
runs = defaultdict(dict)
for line in open(sys.argv[1]):
    scenario, which, rep, rate, cpu, failures = line.rstrip("\n").split("\t")
    runs[(scenario, rep)][which] = (float(rate), float(cpu) if cpu else None, int(failures))
by_scenario = defaultdict(list)
for (scenario, rep), pair in sorted(runs.items()):
    if "A" in pair and "B" in pair:
        by_scenario[scenario].append(pair)
print()
print("| scenario | A certs/s | B certs/s | B/A certs/s (median of pairs) | A µs CPU/cert | B µs CPU/cert | B/A CPU/cert (median of pairs) | failures |")
print("|---|---|---|---|---|---|---|---|")
for scenario, pairs in by_scenario.items():
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    a_rate = med([p["A"][0] for p in pairs])
    b_rate = med([p["B"][0] for p in pairs])
    rate_ratio = med([p["B"][0] / p["A"][0] for p in pairs if p["A"][0]])
    a_cpu = med([p["A"][1] for p in pairs if p["A"][1] is not None])
    b_cpu = med([p["B"][1] for p in pairs if p["B"][1] is not None])
    cpu_ratio = med([p["B"][1] / p["A"][1] for p in pairs if p["A"][1] and p["B"][1]])
    failures = sum(p["A"][2] + p["B"][2] for p in pairs)
    print(f"| {scenario} | {a_rate:,.0f} | {b_rate:,.0f} | {rate_ratio:.1%} | {a_cpu:.0f} | {b_cpu:.0f} | {cpu_ratio:.1%} | {failures} |")
EOF
