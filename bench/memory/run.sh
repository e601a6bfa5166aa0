#!/usr/bin/env bash
# Measures what the agent's memory cgroup is charged with 110 pods, each
# with a secret volume and a projected volume (configMap, secret,
# downwardAPI; like a pod's kube-api-access-* volume) written to tmpfs by
# the agent: its own RSS plus the tmpfs and page-cache pages it wrote,
# which a container's memory limit counts. As root:
#
#   bench/memory/run.sh [payload-bytes-per-secret-key]   # default 2048
#
# It builds the agent, starts it in a fresh memory cgroup (v1 or v2),
# writes the manifests, waits for every pod to be ready, and prints the
# cgroup's peak and current charge, its shmem (tmpfs) part, and the
# agent's RSS. Everything it made is removed at the end.
set -euo pipefail
payload=${1:-2048}
pods=110
cd "$(dirname "$0")/../.."
work=$(mktemp -d /tmp/va-mem.XXXXXX)
go build -o "$work/volume-agent" ./cmd/volume-agent

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  v=2; parent=/sys/fs/cgroup$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)
else
  v=1; parent=/sys/fs/cgroup/memory$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
fi
cg=$parent/va-mem-$$
mkdir "$cg"

agent=""
cleanup() {
  if [ -n "$agent" ]; then kill -9 "$agent" 2>/dev/null; wait "$agent" 2>/dev/null || true; fi
  grep " $work/" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/manifests" "$work/root"
value=$(head -c $((payload * 3 / 4 + 1)) /dev/urandom | base64 -w0 | head -c "$payload")
for i in $(seq 1 $pods); do
  cat > "$work/manifests/pod-$i.yaml" <<YAML
apiVersion: v1
kind: Secret
metadata: {name: s-$i}
stringData: {a: "$value", b: "$value", c: "$value"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c-$i}
data: {ca.crt: "$value"}
---
apiVersion: v1
kind: Pod
metadata: {name: p-$i, namespace: default}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
    - {name: secret, secret: {secretName: s-$i}}
    - name: api
      projected:
        sources:
          - configMap: {name: c-$i}
          - secret: {name: s-$i, items: [{key: a, path: token}]}
          - downwardAPI: {items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]}
YAML
done

sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" \
  "$work/volume-agent" --manifests "$work/manifests" --root-dir "$work/root" \
  --status-addr 127.0.0.1:9899 --node-name mem-bench --log-level info > "$work/agent.log" 2>&1 &
agent=$!

ready=0
for _ in $(seq 1 600); do
  ready=$(curl -s 127.0.0.1:9899/v1/pods | grep -Eo '"ready": *true' | wc -l || true)
  [ "$ready" -ge "$pods" ] && break
  sleep 0.1
done
if [ "$ready" -lt "$pods" ]; then
  echo "only $ready of $pods pods ready" >&2; tail -5 "$work/agent.log" >&2; curl -s 127.0.0.1:9899/v1/pods | head -c 600 >&2; exit 1
fi
sleep 2 # let the agent settle after the burst

if [ $v = 1 ]; then
  peak=$(cat "$cg/memory.max_usage_in_bytes"); now=$(cat "$cg/memory.usage_in_bytes")
  shmem=$(awk '$1=="shmem"{print $2}' "$cg/memory.stat")
else
  peak=$(cat "$cg/memory.peak" 2>/dev/null || echo 0); now=$(cat "$cg/memory.current")
  shmem=$(awk '$1=="shmem"{print $2}' "$cg/memory.stat")
fi
rss=$(awk '$1=="VmRSS:"{print $2}' /proc/$agent/status)
mib() { awk -v b="$1" 'BEGIN{printf "%.1f MiB", b/1048576}'; }
echo "pods: $pods ready; payload per secret key: $payload bytes; cgroup v$v"
echo "cgroup peak:    $(mib "$peak")"
echo "cgroup now:     $(mib "$now")"
echo "  tmpfs (shmem): $(mib "$shmem")"
echo "agent RSS:      $(mib $((rss * 1024)))"
