#!/bin/sh
# setup.sh AGENT BENCH OUT [ROUNDS] [BENCH FLAGS...]: pod set-up bursts with
# volume usage walks every second, every minute (the default) and off,
# alternated so that the machine's drift hits each alike: ROUNDS (default 7)
# rounds of the three, the order rotated each round. Each run is the
# bench's usage scenario (go run ./bench -scenario usage: 10 bursts of 110
# pods beside 50 emptyDirs of 2,000 files) with a new agent; its JSON goes
# to OUT/rROUND-PERIOD.json. Prints one line a run: round, period, load
# average at its start, p50 and p99 of the 1,100 pods (ms), median burst
# (first creation to last ready, ms), the agent's CPU a burst (ms), resident
# emptyDirs measured during the bursts. Needs root and jq. AGENT and BENCH
# are built binaries (go build ./cmd/volume-agent, go build ./bench); run
# it from the module.
set -eu
agent=$1 bench=$2 out=$3 rounds=${4:-7}
shift 3
[ $# -eq 0 ] || shift
mkdir -p "$out"
echo "round period load p50_ms p99_ms burst_ms cpu_ms walked"
round=1
while [ "$round" -le "$rounds" ]; do
	case $((round % 3)) in
	1) order="1s 0s 1m" ;;
	2) order="0s 1m 1s" ;;
	0) order="1m 1s 0s" ;;
	esac
	for p in $order; do
		load=$(cut -d' ' -f1 /proc/loadavg)
		json="$out/r$round-$p.json"
		"$bench" -modes manifest -scenario usage -agent "$agent" \
			-agent-args "--volume-stats-period=$p" -out "$json" "$@" >"$out/r$round-$p.txt" 2>&1 ||
			{ echo "round $round $p failed: see $out/r$round-$p.txt" >&2; continue; }
		jq -r --arg r "$round" --arg p "$p" --arg l "$load" '
			[.figures[] | select(.latency and (.name | startswith("burst ")))] as $b |
			[$r, $p, $l,
			 (.figures[] | select(.latency and (.name | test("^[0-9]+ bursts"))) | .latency.p50_ms, .latency.p99_ms),
			 ($b | map(.total_ms) | sort | (.[(length - 1) / 2 | floor] + .[length / 2 | floor]) / 2),
			 (.figures[] | select(.name | startswith("agent CPU")) | .value),
			 (.figures[] | select(.name | startswith("resident")) | .value)] | map(tostring) | join(" ")' "$json"
	done
	round=$((round + 1))
done
