#!/bin/sh
# cpu.sh BINARY N PERIOD [SETTLE] [SAMPLE]: runs the agent on a manifest
# directory of N pods with one disk emptyDir each (10 files of 4 KiB), waits
# SETTLE seconds (default 75: the first measurements are spread over one
# period) and then samples the agent's CPU time (utime+stime of
# /proc/PID/stat) and context switches (voluntary and involuntary, summed
# over its threads) over SAMPLE seconds (default 60). Prints one line:
# N PERIOD cpu_millicores wakeups_per_second. Needs root.
set -eu
bin=$1 n=$2 period=$3 settle=${4:-75} sample=${5:-60}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
mkdir "$work/manifests" "$work/root"
i=0
while [ "$i" -lt "$n" ]; do
	cat > "$work/manifests/pod-$i.yaml" <<POD
apiVersion: v1
kind: Pod
metadata: {name: pod-$i, namespace: default}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: scratch, emptyDir: {}}]
POD
	i=$((i + 1))
done
"$bin" --root-dir "$work/root" --manifests "$work/manifests" --node-name node-1 \
	--status-addr 127.0.0.1:0 --log-level warn --volume-stats-period "$period" 2>"$work/log" &
pid=$!
# Fill each emptyDir once it is set up.
deadline=$(( $(date +%s) + 60 ))
while [ "$(ls -d "$work"/root/pods/*/volumes/kubernetes.io~empty-dir/scratch 2>/dev/null | wc -l)" -lt "$n" ]; do
	[ "$(date +%s)" -lt "$deadline" ] || { echo "pods not set up" >&2; cat "$work/log" >&2; exit 1; }
	sleep 1
done
for d in "$work"/root/pods/*/volumes/kubernetes.io~empty-dir/scratch; do
	for j in 0 1 2 3 4 5 6 7 8 9; do head -c 4096 /dev/zero > "$d/f$j"; done
done
sleep "$settle"
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
csw() { cat /proc/$pid/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}'; }
c0=$(cpu) w0=$(csw)
sleep "$sample"
c1=$(cpu) w1=$(csw)
hz=$(getconf CLK_TCK)
echo "$n $period $(echo "($c1 - $c0) * 1000 / $hz / $sample" | bc -l | xargs printf %.1f) $(echo "($w1 - $w0) / $sample" | bc -l | xargs printf %.1f)"
