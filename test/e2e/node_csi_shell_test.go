package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volume-agent/volume-agent/test/node"
)

// shellPod is a pod of the tools image on the test node whose container
// runs, one at a time, the shell scripts the test drops into its emptyDir
// "ctl" through the node's file system, and leaves their output and exit
// status beside them. So what a script does to the pod's volumes is done
// by the container, through the mounts the kubelet made for it. (The
// kubelet's exec API would serve too, but through the API server only
// with a client certificate for the kubelet, which the test control plane
// does not give it.)
type shellPod struct {
	t   *testing.T
	n   *node.Node
	pod *v1.Pod
}

// shellLoop is the container's command: run ctl/cmd when it appears (the
// test renames it into place whole), then publish its output (out) and
// exit status (rc), each renamed into place whole.
const shellLoop = `cd /ctl
while :; do
  if [ -f cmd ]; then
    mv cmd running
    sh running >out.tmp 2>&1; echo $? >rc.tmp
    mv out.tmp out; mv rc.tmp rc; rm running
  fi
  sleep 0.1
done`

// shellPodSpec is a pod named name of the tools image that mounts each
// claim of claims at its key, with the ctl emptyDir at /ctl.
func shellPodSpec(name string, claims map[string]string) *v1.Pod {
	mounts := []v1.VolumeMount{{Name: "ctl", MountPath: "/ctl"}}
	volumes := []v1.Volume{{Name: "ctl", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	for path, claim := range claims {
		vol := "claim-" + claim
		mounts = append(mounts, v1.VolumeMount{Name: vol, MountPath: path})
		volumes = append(volumes, v1.Volume{Name: vol, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: new(int64), // sh as PID 1 ignores SIGTERM
			AutomountServiceAccountToken:  new(bool),
			Containers: []v1.Container{{
				Name: "sh", Image: node.ToolsImageRef, Command: []string{"/bin/sh", "-c", shellLoop},
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}
}

// startShellPod creates the pod in namespace e2e and waits until it runs;
// it returns the pod and how long it took from create to Running.
func startShellPod(t *testing.T, n *node.Node, c kubernetes.Interface, pod *v1.Pod) (*shellPod, time.Duration) {
	t.Helper()
	start := time.Now()
	created, err := c.CoreV1().Pods("e2e").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var running *v1.Pod
	waitEvery(t, 3*time.Minute, 100*time.Millisecond, "pod "+pod.Name+" Running", func() (bool, string) {
		p, err := c.CoreV1().Pods("e2e").Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		running = p
		return p.Status.Phase == v1.PodRunning, podDetail(t, c, p)
	})
	took := time.Since(start)
	if running.UID != created.UID {
		t.Fatalf("pod %s was replaced while starting", pod.Name)
	}
	return &shellPod{t: t, n: n, pod: running}, took
}

// podDetail is a pod's phase, container states and events, for a timeout.
func podDetail(t *testing.T, c kubernetes.Interface, p *v1.Pod) string {
	var events []string
	list, err := c.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(p.UID)})
	if err == nil {
		for _, e := range list.Items {
			events = append(events, e.Reason+": "+e.Message)
		}
	}
	return fmt.Sprintf("%s %+v; events %q", p.Status.Phase, p.Status.ContainerStatuses, events)
}

// ctl is the pod's ctl emptyDir as the test sees it on the node.
func (s *shellPod) ctl(name string) string {
	return s.n.Path(filepath.Join("/var/lib/kubelet/pods", string(s.pod.UID), "volumes/kubernetes.io~empty-dir/ctl", name))
}

// run has the container run script and returns its output; a non-zero
// exit status fails the test.
func (s *shellPod) run(script string) string {
	s.t.Helper()
	out, rc := s.try(script)
	if rc != 0 {
		s.t.Fatalf("pod %s: %q exited %d:\n%s", s.pod.Name, script, rc, out)
	}
	return out
}

// try has the container run script and returns its output and exit
// status, within 2 minutes.
func (s *shellPod) try(script string) (string, int) {
	s.t.Helper()
	for _, f := range []string{"rc", "out"} {
		if err := os.Remove(s.ctl(f)); err != nil && !os.IsNotExist(err) {
			s.t.Fatal(err)
		}
	}
	if err := os.WriteFile(s.ctl("cmd.tmp"), []byte(script+"\n"), 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(s.ctl("cmd.tmp"), s.ctl("cmd")); err != nil {
		s.t.Fatal(err)
	}
	var rc int
	waitEvery(s.t, 2*time.Minute, 50*time.Millisecond, fmt.Sprintf("pod %s to run %q", s.pod.Name, script), func() (bool, string) {
		b, err := os.ReadFile(s.ctl("rc"))
		if err != nil {
			return false, err.Error()
		}
		rc, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, fmt.Sprint(err)
	})
	out, err := os.ReadFile(s.ctl("out"))
	if err != nil {
		s.t.Fatal(err)
	}
	return string(out), rc
}

// hashes runs sha256sum on the files in dir (relative names) and returns
// their hashes by name.
func (s *shellPod) hashes(dir string) map[string]string {
	s.t.Helper()
	out := s.run("cd " + dir + " && for f in *; do [ -f \"$f\" ] && sha256sum \"$f\"; done; true")
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			got[f[1]] = f[0]
		}
	}
	return got
}

// waitEvery checks cond every interval until it holds, or fails the test after
// timeout with cond's last detail.
func waitEvery(t *testing.T, timeout, interval time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, detail)
		}
		time.Sleep(interval)
	}
}
