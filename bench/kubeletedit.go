package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
)

// editTimeout bounds how long an update may take to show: the kubelet
// refreshes a ConfigMap volume on its pod sync (1 min by default) after
// its watch saw the change, so 5 min is generous.
const editTimeout = 5 * time.Minute

// kubeletEditScenario is -scenario kubelet-edit: -pods pods whose
// volumes both the agent and a real kubelet set up, then each pod's
// ConfigMap updated through the API at once, timed until the new content
// is in the pod's configMap volume, the agent's and the kubelet's.
func kubeletEditScenario(r *runner, o options, rep *report, cfg agentConfig) {
	k := startSideBySide(r, o, rep, cfg)
	for round := range o.rounds {
		k.editRound(round)
	}
}

// editRound starts k.pods pods, updates their ConfigMaps at once and
// records how long each side took to show the update.
func (k *sideBySide) editRound(round int) {
	r := k.r
	k.next++
	m := kubeletMixes[1] // configMap + secret + emptyDir: no hostPath, no token
	pods := make([]*v1.Pod, k.pods)
	cms := make([]*v1.ConfigMap, k.pods)
	forEach(k.pods, func(i int) {
		pod, cm, sec := k.kubeletPod(m, fmt.Sprintf("e%d-%d", k.next, i), benchNode)
		k.c.putConfigMap(cm)
		k.c.putSecret(sec)
		k.c.putPod(pod)
		pods[i], cms[i] = pod, cm
	})
	// files[2i] is pod i's file in the agent's volume, files[2i+1] in the kubelet's.
	files := make([]string, 0, 2*k.pods)
	for _, p := range pods {
		uid := k.c.uid(p)
		if _, err := k.a.waitReady(context.Background(), uid, readyTimeout); err != nil {
			r.Fatalf("agent: pod %s not ready: %v", p.Name, err)
		}
		files = append(files, filepath.Join(volumePath(r, k.a, uid, "config"), "config"),
			k.n.Path("/var/lib/kubelet/pods/"+uid+"/volumes/kubernetes.io~configmap/config/config"))
	}
	k.waitRunning(pods)
	time.Sleep(2 * time.Second) // let both settle after the set-ups
	load := loadAverage()

	want := make([][]byte, k.pods)
	began := make([]time.Time, k.pods)
	forEach(k.pods, func(i int) {
		cm := cms[i].DeepCopy()
		value := fmt.Sprintf("update %d of %s\n", round+1, cm.Name)
		cm.Data = map[string]string{"config": value}
		want[i] = []byte(value)
		began[i] = time.Now()
		k.c.putConfigMap(cm)
	})
	lat := make([]time.Duration, len(files))
	pending := map[int]bool{}
	for i := range files {
		pending[i] = true
	}
	deadline := time.Now().Add(editTimeout)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			r.Fatalf("%d of %d volumes never showed the update within %v (e.g. %s)", len(pending), len(files), editTimeout, files[anyKey(pending)])
		}
		for i := range pending {
			if b, err := os.ReadFile(files[i]); err == nil && bytes.Equal(b, want[i/2]) {
				lat[i] = time.Since(began[i/2])
				delete(pending, i)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	agentLat, kubeletLat := make([]time.Duration, k.pods), make([]time.Duration, k.pods)
	for i := range k.pods {
		agentLat[i], kubeletLat[i] = lat[2*i], lat[2*i+1]
	}
	name := fmt.Sprintf("round %d: %d ConfigMaps updated at once (load %s) → new content, ", round+1, k.pods, load)
	k.rep.distribution("cluster", name+"agent", agentLat, 0, "")
	k.rep.distribution("cluster", name+"kubelet", kubeletLat, 0, "")
	r.Logf("bench: edit round %d: agent %.1f ms, kubelet %.1f ms (p50)", round+1, summarize(agentLat).P50, summarize(kubeletLat).P50)
	forEach(k.pods, func(i int) { k.c.deletePod(pods[i]) })
}
