package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClaimReadOnlyEditOfARunningPod: a running pod's claim volume edited
// to readOnly: true keeps the read-write mount it was set up with, as
// every volume of a running pod does, and /v1/pods says so: from the
// moment the agent shows the edit, the volume is never shown Mounted
// without an error, the error says that the change needs a new pod, and
// the data stays. The reverse edit (readOnly: true → false) alike: the
// read-only mount stays and is never shown as what the spec asks. Both
// hold across a SIGTERM and a SIGKILL restart, after which the agent
// knows what was set up only from the kernel's mount table. A pod added
// anew gets the mount its spec asks for.
func TestClaimReadOnlyEditOfARunningPod(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("pvs.yaml", fmt.Sprintf(localPV, "pv-data", "1Gi", disk(t, "data"))+"---"+fmt.Sprintf(localPV, "pv-logs", "1Gi", disk(t, "logs")))
	a.writeManifest("claims.yaml", withSpecField(namedClaim("data"), "volumeName: pv-data")+"---"+
		withSpecField(namedClaim("logs"), "volumeName: pv-logs"))
	a.writeManifest("writer.yaml", claimsPod("writer", claimVol{"store", "data", false}))
	a.writeManifest("reader.yaml", claimsPod("reader", claimVol{"store", "logs", true}))
	a.start()
	writer := a.waitPod("default", "writer", 10*time.Second, ready)
	rw := writer.volume("store").Path
	ro := a.waitPod("default", "reader", 10*time.Second, ready).volume("store").Path
	if rw == "" || readOnlyMount(t, rw) {
		t.Fatalf("writer's volume at %q; want a writable mount", rw)
	}
	checkNotWritable(t, ro)
	file := filepath.Join(rw, "db")
	if err := os.WriteFile(file, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	mounts := mountIDsUnder(t, a.resolvedRoot())

	edited := map[string]string{"writer": "read-write to readOnly", "reader": "readOnly to read-write"}
	a.writeManifest("writer.yaml", claimsPod("writer", claimVol{"store", "data", true}))
	a.writeManifest("reader.yaml", claimsPod("reader", claimVol{"store", "logs", false}))
	for pod, change := range edited {
		// Until the agent has read the edit, the pod is as it was.
		a.waitPod("default", pod, 10*time.Second, func(p apiPod) bool { return keptError(p.volume("store").Error, change) })
	}
	for round, restart := range []func(){func() {}, func() { a.restart(false) }, func() { a.restart(true) }} {
		what := fmt.Sprintf("round %d", round)
		restart()
		a.neverShownAsAsked(what, edited)
		if after := mountIDsUnder(t, a.resolvedRoot()); after != mounts {
			t.Fatalf("(%s) the mounts changed: %s -> %s", what, mounts, after)
		}
		if readOnlyMount(t, rw) {
			t.Fatalf("(%s) the writer's read-write mount %s was made read-only", what, rw)
		}
		checkNotWritable(t, ro)
		checkFile(t, file, "precious")
	}

	// The pod deleted and added again is a new pod: its volume is mounted
	// as its spec asks.
	a.removeManifest("writer.yaml")
	a.waitPodDirGone(writer.UID)
	a.writeManifest("writer.yaml", claimsPod("writer", claimVol{"store", "data", true}))
	v := a.waitPod("default", "writer", 10*time.Second, ready).volume("store")
	if v.Error != "" {
		t.Fatalf("the new pod's volume = %+v; want no error", v)
	}
	checkNotWritable(t, v.Path)
	checkFile(t, filepath.Join(v.Path, "db"), "precious")
}

// neverShownAsAsked polls /v1/pods until, for 2 s on end, the volume
// "store" of each pod of edited (by name, in namespace default) has an
// error that names the change (edited's value), says that it needs a new
// pod, and names the field; it fails at once if such a volume is ever
// shown Mounted without an error.
func (a *agent) neverShownAsAsked(what string, edited map[string]string) {
	a.t.Helper()
	a.untilSettled(what, "the edited volumes to be shown kept", func(all []apiPod) bool {
		pods := map[string]apiPod{}
		for _, p := range all {
			pods[p.Namespace+"/"+p.Name] = p
		}
		settled := true
		for pod, change := range edited {
			v := pods["default/"+pod].volume("store")
			if v.State == "Mounted" && v.Error == "" {
				a.t.Fatalf("(%s) pod %s: its edited volume is shown Mounted without an error: %+v", what, pod, pods["default/"+pod])
			}
			settled = settled && keptError(v.Error, change) && (v.State == "Mounted" || v.State == "Failed")
		}
		return settled
	})
}

// keptError reports whether msg says that volume store changed as change
// says, in which field, and that it needs a new pod.
func keptError(msg, change string) bool {
	for _, s := range []string{`"store"`, change, "persistentVolumeClaim.readOnly", "kept until the pod is deleted"} {
		if !strings.Contains(msg, s) {
			return false
		}
	}
	return true
}
