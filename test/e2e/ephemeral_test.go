package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ephemeralClassManifest is a StorageClass "eph" of the local provisioner
// (plain directories, deleted with their claim).
const ephemeralClassManifest = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: eph}
provisioner: local.volume-agent.io
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
parameters: {enforce: "false"}
`

// ephemeralPodManifest is pod %s with the ephemeral volume "scratch" of
// class eph, its template's metadata %s.
const ephemeralPodManifest = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - name: scratch
    ephemeral:
      volumeClaimTemplate:
        metadata: %s
        spec:
          storageClassName: eph
          accessModes: [ReadWriteOnce]
          resources: {requests: {storage: 1Gi}}
`

// stateEphemeralClaims returns the names of the claims made for ephemeral
// volumes in <root>/claims.json.
func stateEphemeralClaims(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Ephemeral []struct {
			Claim struct {
				Metadata struct{ Name string } `json:"metadata"`
			} `json:"claim"`
		} `json:"ephemeralClaims"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range f.Ephemeral {
		out = append(out, e.Claim.Metadata.Name)
	}
	return out
}

// TestManifestEphemeralVolumes: with no cluster, the agent makes the claim
// of a pod's generic ephemeral volume from its template (recorded in
// claims.json), provisions and mounts it; a SIGKILL restart makes neither a
// second claim nor a second volume and loses no data while the pod runs;
// removing the pod deletes the claim and its storage. A template field the
// agent does not support, and a claim of that name the pod does not own,
// fail the volume with a clear error and mount nothing.
func TestManifestEphemeralVolumes(t *testing.T) {
	a := newAgent(t)
	// The root dir is reached through a symlink, as on nodes whose
	// /var/lib is a link to a data disk.
	link := filepath.Join(t.TempDir(), "root")
	if err := os.Symlink(a.root, link); err != nil {
		t.Fatal(err)
	}
	a.root = link
	data := filepath.Join(t.TempDir(), "local")
	a.writeManifest("class.yaml", ephemeralClassManifest)
	a.writeManifest("web.yaml", fmt.Sprintf(ephemeralPodManifest, "web", "{labels: {app: web}}"))
	a.writeManifest("named.yaml", fmt.Sprintf(ephemeralPodManifest, "named", "{name: mine}"))
	a.writeManifest("taken.yaml", fmt.Sprintf(ephemeralPodManifest, "taken", "{}")+"---"+fmt.Sprintf(classClaim, "taken-scratch", "eph"))
	start := time.Now()
	a.start("--provisioners", "local", "--local-path-root", data, "--reclaim-delay", "0s")
	p := a.waitPod("default", "web", 20*time.Second, ready)
	figure(t, "agent start to a manifest pod's ephemeral volume mounted", time.Since(start))
	v := p.volume("scratch")
	if v.Claim != "web-scratch" || !strings.HasPrefix(v.PV, "pvc-") || filepath.Base(v.Path) != v.PV {
		t.Fatalf("volume = %+v", v)
	}
	dir := "default-web-scratch-" + v.PV
	if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by web"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFile(t, filepath.Join(data, dir, "written"), "by web")
	if got := stateEphemeralClaims(t, a.root); !slices.Equal(got, []string{"web-scratch"}) {
		t.Errorf("claims.json has ephemeral claims %v, want [web-scratch]", got)
	}

	for name, want := range map[string]string{
		"named": `ephemeral volume "scratch" of pod default/named: volumeClaimTemplate.metadata.name is not supported: only labels and annotations are (the claim is named named-scratch and owned by the pod)`,
		"taken": "PVC default/taken-scratch was not created for pod default/taken (pod is not owner)",
	} {
		p := a.waitPod("default", name, 10*time.Second, func(p apiPod) bool { return p.volume("scratch").Error != "" })
		if got := p.volume("scratch").Error; !strings.HasSuffix(got, want) || p.Ready {
			t.Errorf("pod %s: volume error %q, want %q", name, got, want)
		}
	}
	if got := entries(t, data); !slices.Equal(got, []string{dir}) {
		t.Errorf("%s holds %v, want only %s", data, got, dir)
	}

	for _, crash := range []bool{true, false} {
		how := map[bool]string{true: "SIGKILL", false: "SIGTERM"}[crash]
		ids := mountIDsUnder(t, a.resolvedRoot())
		a.restart(crash)
		if v2 := a.waitPod("default", "web", 20*time.Second, ready).volume("scratch"); v2.PV != v.PV || v2.Path != v.Path {
			t.Errorf("after %s and restart the volume is %+v, was %+v", how, v2, v)
		}
		checkFile(t, filepath.Join(v.Path, "written"), "by web")
		if got := entries(t, data); !slices.Equal(got, []string{dir}) {
			t.Errorf("after %s and restart %s holds %v, want only %s", how, data, got, dir)
		}
		if got := stateEphemeralClaims(t, a.root); !slices.Equal(got, []string{"web-scratch"}) {
			t.Errorf("after %s and restart claims.json has ephemeral claims %v, want [web-scratch]", how, got)
		}
		if after := mountIDsUnder(t, a.resolvedRoot()); after != ids {
			t.Errorf("a %s restart remounted: %s -> %s", how, ids, after)
		}
	}

	start = time.Now()
	a.removeManifest("web.yaml")
	waitFor(t, 20*time.Second, "the claim web-scratch and its directory deleted", func() (bool, string) {
		_, claims := a.get("/v1/claims")
		return !strings.Contains(claims, "web-scratch") && len(entries(t, data)) == 0 && len(stateEphemeralClaims(t, a.root)) == 0,
			fmt.Sprint(claims, entries(t, data))
	})
	figure(t, "manifest pod removed to its ephemeral claim and directory deleted", time.Since(start))
	if _, ok := a.pod("default", "web"); ok {
		t.Errorf("pod web still served")
	}
}

// TestManifestEphemeralClaimsAcrossSIGKILL kills the agent at a different
// moment after each new pod with an ephemeral volume appears (before the
// agent reads it, while its claim is made, while it is provisioned, after
// it is mounted): after each restart every pod has exactly one claim and
// one directory, the same as before, and what was written in the volumes
// of the running pods is still there.
func TestManifestEphemeralClaimsAcrossSIGKILL(t *testing.T) {
	a := newAgent(t)
	data := filepath.Join(t.TempDir(), "local")
	a.writeManifest("class.yaml", ephemeralClassManifest)
	a.start("--provisioners", "local", "--local-path-root", data, "--reclaim-delay", "0s")
	pvs := map[string]string{} // pod → PV
	var names []string
	for i, delay := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		name := fmt.Sprintf("p%d", i)
		a.writeManifest(name+".yaml", fmt.Sprintf(ephemeralPodManifest, name, "{}"))
		time.Sleep(delay)
		a.restart(true)
		names = append(names, name)
		for _, n := range names {
			v := a.waitPod("default", n, 20*time.Second, ready).volume("scratch")
			switch pv, seen := pvs[n]; {
			case !seen:
				pvs[n] = v.PV
				if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by "+n), 0o644); err != nil {
					t.Fatal(err)
				}
			case v.PV != pv:
				t.Errorf("after SIGKILL %d pod %s has PV %s, had %s", i, n, v.PV, pv)
			default:
				checkFile(t, filepath.Join(v.Path, "written"), "by "+n)
			}
		}
		var wantDirs, wantClaims []string
		for _, n := range names {
			wantDirs = append(wantDirs, "default-"+n+"-scratch-"+pvs[n])
			wantClaims = append(wantClaims, n+"-scratch")
		}
		slices.Sort(wantDirs)
		if got := entries(t, data); !slices.Equal(got, wantDirs) {
			t.Errorf("after SIGKILL %d (%v after pod %s appeared) %s holds %v, want %v", i, delay, name, data, got, wantDirs)
		}
		if got := stateEphemeralClaims(t, a.root); !slices.Equal(got, wantClaims) {
			t.Errorf("after SIGKILL %d claims.json has ephemeral claims %v, want %v", i, got, wantClaims)
		}
	}
}
