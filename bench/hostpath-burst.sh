#!/bin/bash
# hostPath set-up durations in a burst (issue 21), as root:
#   bench/hostpath-burst.sh BINARY
# 50 manifest pods, each with a hostPath volume of type Directory and a disk
# emptyDir, renamed into the manifest directory at once; the durations are
# those of the agent's "volume set up" log lines of the hostPath volumes.
set -euo pipefail
agent=$1
dir=$(mktemp -d)
mkdir -p "$dir/manifests" "$dir/root" "$dir/host"
"$agent" --manifests "$dir/manifests" --root-dir "$dir/root" --status-addr 127.0.0.1:0 \
	--node-name node-1 --log-format json --log-level debug 2>"$dir/log" &
pid=$!
sleep 1
for i in $(seq 1 50); do
	mkdir -p "$dir/host/$i"
	cat >"$dir/manifests/.p$i.tmp" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: p$i}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: host, hostPath: {path: $dir/host/$i, type: Directory}}
  - {name: scratch, emptyDir: {}}
YAML
done
for i in $(seq 1 50); do mv "$dir/manifests/.p$i.tmp" "$dir/manifests/p$i.yaml"; done
sleep 4
kill -TERM "$pid"
wait "$pid" || true
grep '"volume set up"' "$dir/log" | grep host-path | python3 -c '
import sys, json
d = sorted(json.loads(l)["duration"] * 1000 for l in sys.stdin)
print("%d hostPath set-ups: mean %.2f ms, p50 %.2f, p99 %.2f, min %.2f, max %.2f"
      % (len(d), sum(d) / len(d), d[len(d) // 2], d[int(len(d) * 0.99) - 1], d[0], d[-1]))'
# Disk emptyDirs and hostPaths mount nothing; never remove a tree with a mount in it.
if grep -q " $dir/" /proc/self/mounts; then
	echo "mounts remain under $dir; left in place" >&2
else
	rm -rf "$dir"
fi
