package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/test/controlplane"
	"github.com/volume-agent/volume-agent/test/node"
)

// TestPodRuns starts a node and runs a pod of the sleep image on it through
// the scheduler: the runtime, the sandbox image, the loopback-only CNI and
// the kubelet's registration all work.
func TestPodRuns(t *testing.T) {
	cp := controlplane.Start(t, controlplane.Options{ControllerManager: true, Scheduler: true})
	n := node.Start(t, cp, node.Options{})
	cp.CreateNamespace(t, "e2e")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleep", Namespace: "e2e"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sleep", Image: node.SleepImageRef}},
		},
	}
	ctx := context.Background()
	if _, err := cp.Client().CoreV1().Pods("e2e").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := cp.Client().CoreV1().Pods("e2e").Get(ctx, "sleep", metav1.GetOptions{})
		if err == nil && got.Status.Phase == corev1.PodRunning {
			// The pod's cgroup is under the node's own cgroup root.
			podCgroup := filepath.Join("/sys/fs/cgroup/memory", n.CgroupRoot(), "kubepods", "besteffort", "pod"+string(got.UID))
			if _, err := os.Stat(podCgroup); err != nil {
				t.Errorf("pod cgroup: %v", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not Running: %v %+v", err, got.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
