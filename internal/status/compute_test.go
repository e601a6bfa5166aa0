package status

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/volume"
)

const (
	cm = "kubernetes.io/configmap"
	ed = "kubernetes.io/empty-dir"
)

func wanted(name, plugin, version string) dsw.Volume {
	return dsw.Volume{Name: name, Plugin: plugin, Spec: &volume.Spec{}, Version: version}
}

func setUp(uid, name, plugin, version string, state asw.State) asw.Volume {
	return asw.Volume{PodUID: types.UID(uid), Name: name, Plugin: plugin, Dir: "/root/" + name, Path: "/host/" + name, State: state, Version: version}
}

func TestVolumeStates(t *testing.T) {
	problem := dsw.Volume{Name: "v", Problem: "configMap.items[0].path: must be relative"}
	unsupported := dsw.Volume{Name: "v", Problem: "csi volumes are not supported by volume-agent", Unsupported: true}
	mounted := setUp("p", "v", cm, "1", asw.Mounted)
	noSwap, swappable := setUp("p", "v", ed, "1", asw.Mounted), setUp("p", "v", ed, "1", asw.Mounted)
	noSwap.Swap, swappable.Swap = volume.SwapNever, volume.SwapAllowed
	foundSwappable := setUp("p", "v", ed, "", asw.Uncertain)
	foundSwappable.Swap = volume.SwapAllowed
	conflict := dsw.Volume{Name: "v", SpecName: "b", Claim: "data", PV: "v", Conflict: true,
		Problem: `volumes "a" and "b" both use claim ns/data, and only "b" is readOnly: …`}
	const lv = "kubernetes.io/local-volume"
	block, published := wanted("v", lv, "1"), setUp("p", "v", lv, "1", asw.Mounted)
	block.Block, published.Block = true, true
	readOnly := block
	readOnly.Spec = &volume.Spec{Volume: &v1.Volume{VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ReadOnly: true}}}}
	kept := dsw.Volume{Name: "v", Kept: true, Problem: `volume "v" is set up but not in the pod's spec: … kept until the pod is deleted`}
	tests := []struct {
		name    string
		desired dsw.Volume
		actual  *asw.Volume
		opErr   string
		want    Volume
	}{
		{"nothing set up yet", wanted("v", cm, "1"), nil, "",
			Volume{Name: "v", Plugin: cm, State: Pending}},
		{"mounted", wanted("v", cm, "1"), &mounted, "",
			Volume{Name: "v", Plugin: cm, Path: "/host/v", State: Mounted}},
		{"mounted, refresh pending", wanted("v", cm, "2"), &mounted, "",
			Volume{Name: "v", Plugin: cm, Path: "/host/v", State: Mounted}},
		{"mounted with a refresh error keeps Mounted and shows the error", wanted("v", cm, "2"), &mounted, "get configMap ns/app: boom",
			Volume{Name: "v", Plugin: cm, Path: "/host/v", State: Mounted, Error: "get configMap ns/app: boom"}},
		{"set-up failed", wanted("v", cm, "1"), nil, "configMap ns/app not found",
			Volume{Name: "v", Plugin: cm, State: Failed, Error: "configMap ns/app not found"}},
		{"uncertain", wanted("v", cm, "1"), ptr(setUp("p", "v", cm, "", asw.Uncertain)), "",
			Volume{Name: "v", Plugin: cm, State: Pending}},
		{"uncertain after a timeout", wanted("v", cm, "1"), ptr(setUp("p", "v", cm, "", asw.Uncertain)), "context deadline exceeded",
			Volume{Name: "v", Plugin: cm, State: Failed, Error: "context deadline exceeded"}},
		{"mounted by the plugin it no longer wants", wanted("v", ed, "1"), &mounted, "",
			Volume{Name: "v", Plugin: ed, State: Pending}},
		{"on a tmpfs with noswap", wanted("v", ed, "1"), &noSwap, "",
			Volume{Name: "v", Plugin: ed, Path: "/host/v", State: Mounted, NoSwap: ptr(true)}},
		{"on a tmpfs that may reach swap", wanted("v", ed, "1"), &swappable, "",
			Volume{Name: "v", Plugin: ed, Path: "/host/v", State: Mounted, NoSwap: ptr(false)}},
		{"found on disk on a tmpfs that may reach swap, not set up again yet", wanted("v", ed, "1"), &foundSwappable, "",
			Volume{Name: "v", Plugin: ed, State: Pending}},
		{"kept, on a tmpfs that may reach swap", dsw.Volume{Name: "v", Kept: true}, &swappable, "",
			Volume{Name: "v", Plugin: ed, Path: "/host/v", State: Mounted, NoSwap: ptr(false)}},
		{"unsupported", unsupported, nil, "",
			Volume{Name: "v", State: Unsupported, Error: unsupported.Problem}},
		{"unsupported even if something is mounted", unsupported, &mounted, "",
			Volume{Name: "v", State: Unsupported, Error: unsupported.Problem}},
		{"problem", problem, nil, "",
			Volume{Name: "v", State: Failed, Error: problem.Problem}},
		{"problem with an old operation error shows the problem", problem, nil, "old error",
			Volume{Name: "v", State: Failed, Error: problem.Problem}},
		{"problem after the volume was mounted keeps Mounted and shows the problem", problem, &mounted, "",
			Volume{Name: "v", Plugin: cm, Path: "/host/v", State: Mounted, Error: problem.Problem}},
		{"conflict over a directory: Failed, never shown with what is mounted there", conflict, &mounted, "",
			Volume{Name: "b", State: Failed, Error: conflict.Problem, Claim: "data", PV: "v"}},
		{"conflict over a directory found on disk after a restart", conflict, ptr(setUp("p", "v", cm, "", asw.Uncertain)), "",
			Volume{Name: "b", State: Failed, Error: conflict.Problem, Claim: "data", PV: "v"}},
		{"conflict with an operation error of the directory's volume shows the conflict", conflict, &mounted, "refresh failed",
			Volume{Name: "b", State: Failed, Error: conflict.Problem, Claim: "data", PV: "v"}},
		{"block, not published yet", block, nil, "",
			Volume{Name: "v", Plugin: lv, State: Pending, Mode: "Block"}},
		{"block, published", block, &published, "",
			Volume{Name: "v", Plugin: lv, Path: "/host/v", State: Mounted, Mode: "Block"}},
		{"block, read-only", readOnly, &published, "",
			Volume{Name: "v", Plugin: lv, Path: "/host/v", State: Mounted, Mode: "Block", ReadOnly: true}},
		{"kept block after it left the spec", kept, &published, "",
			Volume{Name: "v", Plugin: lv, Path: "/host/v", State: Mounted, Mode: "Block", Error: kept.Problem}},
		{"kept after it left the spec", kept, &mounted, "",
			Volume{Name: "v", Plugin: cm, Path: "/host/v", State: Mounted, Error: kept.Problem}},
		{"kept after it left the spec, found on disk after a restart", kept, ptr(setUp("p", "v", cm, "", asw.Uncertain)), "",
			Volume{Name: "v", Plugin: cm, Path: "/host/v", State: Mounted, Error: kept.Problem}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}
			w.Desired.SetPod(dsw.Pod{UID: "p", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{tt.desired}})
			if tt.actual != nil {
				w.Actual.Set(*tt.actual)
			}
			w.Desired.SetError(dsw.Key{PodUID: "p", Volume: "v"}, tt.opErr)
			pods := w.Pods()
			if len(pods) != 1 || len(pods[0].Volumes) != 1 {
				t.Fatalf("Pods = %+v", pods)
			}
			if got := pods[0].Volumes[0]; !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("volume = %+v\nwant %+v", got, tt.want)
			}
			if ready := tt.want.State == Mounted; pods[0].Ready != ready {
				t.Fatalf("Ready = %v, want %v", pods[0].Ready, ready)
			}
			counts := w.VolumesByState()
			want := map[string]int{Pending: 0, Mounted: 0, Failed: 0, Unsupported: 0, Terminating: 0, Held: 0}
			want[tt.want.State] = 1
			if !reflect.DeepEqual(counts, want) {
				t.Fatalf("VolumesByState = %v, want %v", counts, want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestPodReadiness(t *testing.T) {
	w := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}
	w.Desired.SetPod(dsw.Pod{UID: "none", Namespace: "ns", Name: "no-volumes"})
	w.Desired.SetPod(dsw.Pod{UID: "two", Namespace: "ns", Name: "two-volumes", Volumes: []dsw.Volume{wanted("a", cm, "1"), wanted("b", ed, "1")}})

	ready := func(uid string) bool {
		t.Helper()
		p, ok := w.Pod(uid)
		if !ok {
			t.Fatalf("pod %s unknown", uid)
		}
		return p.Ready
	}
	if !ready("none") {
		t.Error("a pod without volumes is not ready")
	}
	if ready("two") {
		t.Error("a pod with no volume set up is ready")
	}
	w.Actual.Set(setUp("two", "a", cm, "1", asw.Mounted))
	if ready("two") {
		t.Error("a pod with one of two volumes set up is ready")
	}
	w.Actual.Set(setUp("two", "b", ed, "1", asw.Mounted))
	if !ready("two") {
		t.Error("a pod with every volume mounted is not ready")
	}
	w.Actual.Set(setUp("two", "b", ed, "1", asw.Uncertain))
	if ready("two") {
		t.Error("a pod with an uncertain volume is ready")
	}
	// A volume kept after it left the spec is not used by any container:
	// it does not count, whatever its state.
	w.Desired.SetPod(dsw.Pod{UID: "kept", Namespace: "ns", Name: "kept", Volumes: []dsw.Volume{wanted("a", cm, "1"), {Name: "old", Kept: true, Problem: "kept"}}})
	w.Actual.Set(setUp("kept", "a", cm, "1", asw.Mounted))
	if !ready("kept") {
		t.Error("a kept volume that left the spec holds its pod back")
	}
	if _, ok := w.Pod("unknown"); ok {
		t.Error("an unknown pod was found")
	}
	if got := w.VolumesByState(); !reflect.DeepEqual(got, map[string]int{Pending: 1, Mounted: 2, Failed: 1, Unsupported: 0, Terminating: 0, Held: 0}) {
		t.Errorf("VolumesByState = %v", got)
	}
}

// TestTerminatingPods: a pod gone from the desired state stays listed,
// Terminating, while the actual state has volumes or a directory of it,
// named as the actual state kept it, its volumes Terminating with their
// teardown errors and the pod's reason the first of them. Before the
// desired state is populated, a pod found on disk at start is not listed:
// it may yet be desired, and nothing of it is torn down.
func TestTerminatingPods(t *testing.T) {
	w := Worlds{Desired: dsw.New(nil), Actual: asw.New(nil)}
	w.Desired.SetPod(dsw.Pod{UID: "active", Namespace: "ns", Name: "web", Volumes: []dsw.Volume{wanted("a", cm, "1")}})
	w.Actual.AddPodDir("found", true) // at start, not seen in a source yet
	w.Actual.Set(asw.Volume{PodUID: "found", Name: "v", Plugin: ed, Dir: "/root/v", Path: "/root/v", State: asw.Uncertain, Reconstructed: true})
	w.Actual.NotePod("gone", "ns", "db", "manifests")
	w.Desired.MarkRemoved("gone") // its source dropped it
	claim := setUp("gone", "pv-1", "kubernetes.io/nfs", "1", asw.Mounted)
	claim.SpecName, claim.PV = "data", "pv-1"
	w.Actual.Set(claim)
	w.Actual.Set(setUp("gone", "scratch", ed, "1", asw.Mounted))

	names := func() []string {
		var out []string
		for _, p := range w.Pods() {
			out = append(out, p.UID+" "+p.State)
		}
		return out
	}
	if got, want := names(), []string{"active Active", "gone Terminating"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pods before the sources synced = %v, want %v", got, want)
	}
	gone, ok := w.Pod("gone")
	want := Pod{UID: "gone", Namespace: "ns", Name: "db", State: Terminating, Volumes: []Volume{
		{Name: "data", Plugin: "kubernetes.io/nfs", Path: "/host/pv-1", State: Terminating, PV: "pv-1"},
		{Name: "scratch", Plugin: ed, Path: "/host/scratch", State: Terminating},
	}}
	if !ok || !reflect.DeepEqual(gone, want) {
		t.Fatalf("terminating pod = %+v\nwant %+v", gone, want)
	}
	if n, stuck := w.TerminatingPods(); n != 1 || stuck != 0 {
		t.Errorf("TerminatingPods = %d, %d stuck; want 1, 0 (being torn down)", n, stuck)
	}

	// The teardown of one volume fails: the pod is stuck, and says why.
	w.Actual.SetTearDownError(dsw.Key{PodUID: "gone", Volume: "scratch"}, "remove /root/scratch: mount points remain: [/root/scratch/sub]")
	gone, _ = w.Pod("gone")
	if want := `teardown of volume "scratch" failed: remove /root/scratch: mount points remain: [/root/scratch/sub]`; gone.Reason != want {
		t.Errorf("reason = %q, want %q", gone.Reason, want)
	}
	if v := gone.Volumes[1]; v.State != Terminating || v.Error != "remove /root/scratch: mount points remain: [/root/scratch/sub]" {
		t.Errorf("stuck volume = %+v", v)
	}
	if gone.Ready {
		t.Error("a terminating pod is ready")
	}
	if n, stuck := w.TerminatingPods(); n != 1 || stuck != 1 {
		t.Errorf("TerminatingPods = %d, %d stuck; want 1, 1", n, stuck)
	}
	if got := w.VolumesByState(); !reflect.DeepEqual(got, map[string]int{Pending: 1, Mounted: 0, Failed: 0, Unsupported: 0, Terminating: 2, Held: 0}) {
		t.Errorf("VolumesByState = %v", got)
	}

	// Every source synced, but the removal of the pod found at start does
	// not count yet: it is Held, and says why; then it counts.
	w.Desired.MarkPopulated()
	w.Desired.Hold("found", "its source lists nothing")
	if got, want := names(), []string{"active Active", "found Held", "gone Terminating"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pods once populated = %v, want %v", got, want)
	}
	if found, _ := w.Pod("found"); !strings.HasSuffix(found.Reason, ": its source lists nothing") || found.Volumes[0].State != Held {
		t.Errorf("a held pod = %+v, want its reason and its volumes Held", found)
	}
	if n, _ := w.TerminatingPods(); n != 1 {
		t.Errorf("TerminatingPods = %d with a pod held, want 1", n)
	}
	w.Desired.MarkRemoved("found")
	if got, want := names(), []string{"active Active", "found Terminating", "gone Terminating"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pods once the found pod's removal counts = %v, want %v", got, want)
	}
	if found, _ := w.Pod("found"); found.Namespace != "" || found.Name != "" || len(found.Volumes) != 1 || found.Volumes[0].Name != "v" {
		t.Errorf("a pod known from disk only = %+v; want no name, its volume by its directory's name", found)
	}

	// Its volumes torn down, the directory stays when its removal fails;
	// once removed, the pod is gone from the API.
	w.Actual.Delete(dsw.Key{PodUID: "gone", Volume: "pv-1"})
	w.Actual.Delete(dsw.Key{PodUID: "gone", Volume: "scratch"})
	w.Actual.SetPodDirError("gone", "rmdir /root/pods/gone: input/output error")
	gone, _ = w.Pod("gone")
	if want := "removing the pod directory failed: rmdir /root/pods/gone: input/output error"; gone.State != Terminating || gone.Reason != want || len(gone.Volumes) != 0 {
		t.Errorf("pod whose directory stays = %+v, want reason %q and no volumes", gone, want)
	}
	w.Actual.RemovePodDir("gone")
	if _, ok := w.Pod("gone"); ok {
		t.Error("a pod whose directory is removed is still listed")
	}
	// Desired again (the same UID came back): Active.
	w.Desired.SetPod(dsw.Pod{UID: "found", Namespace: "ns", Name: "back", Volumes: []dsw.Volume{wanted("v", ed, "1")}})
	if p, _ := w.Pod("found"); p.State != Active {
		t.Errorf("a pod desired again = %+v, want Active", p)
	}
}
