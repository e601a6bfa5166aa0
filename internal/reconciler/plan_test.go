package reconciler

import (
	"fmt"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

const (
	cm = "kubernetes.io/configmap"
	ed = "kubernetes.io/empty-dir"
	lv = "kubernetes.io/local-volume"
)

func pod(uid string, vols ...dsw.Volume) dsw.Pod {
	return dsw.Pod{UID: types.UID(uid), Namespace: "ns", Name: uid, Volumes: vols}
}

func want(name, plugin, version string) dsw.Volume {
	return dsw.Volume{Name: name, Plugin: plugin, Version: version}
}

func have(uid, name, plugin, version string, state asw.State, reconstructed bool) asw.Volume {
	return asw.Volume{PodUID: types.UID(uid), Name: name, Plugin: plugin, Version: version, State: state, Reconstructed: reconstructed}
}

// describe renders actions compactly: "setup p/v", "cleanup p".
func describe(actions []action) []string {
	out := []string{}
	for _, a := range actions {
		if a.kind == opCleanup {
			out = append(out, fmt.Sprintf("%s %s", a.kind, a.pod))
			continue
		}
		out = append(out, fmt.Sprintf("%s %s/%s", a.kind, a.pod, a.volume))
	}
	return out
}

// gone is the set of pods whose removal counts.
func gone(uids ...types.UID) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, uid := range uids {
		out[uid] = true
	}
	return out
}

func TestPlan(t *testing.T) {
	problem := dsw.Volume{Name: "v", Problem: "csi volumes are not supported", Unsupported: true}
	tests := []struct {
		name string
		s    snapshot
		want []string
	}{
		{"nothing to do", snapshot{populated: true}, []string{}},
		{"new volume is set up",
			snapshot{desired: []dsw.Pod{pod("p", want("v", cm, "1"))}, populated: true},
			[]string{"setup p/v"}},
		{"mounted at the desired version: nothing",
			snapshot{desired: []dsw.Pod{pod("p", want("v", cm, "1"))}, actual: []asw.Volume{have("p", "v", cm, "1", asw.Mounted, false)}, populated: true},
			[]string{}},
		{"content version moved on: refresh",
			snapshot{desired: []dsw.Pod{pod("p", want("v", cm, "2"))}, actual: []asw.Volume{have("p", "v", cm, "1", asw.Mounted, false)}, populated: true},
			[]string{"refresh p/v"}},
		{"uncertain volume is set up again, not torn down",
			snapshot{desired: []dsw.Pod{pod("p", want("v", cm, "1"))}, actual: []asw.Volume{have("p", "v", cm, "", asw.Uncertain, true)}},
			[]string{"setup p/v"}},
		{"volume of a gone pod is torn down, then its directory cleaned",
			snapshot{actual: []asw.Volume{have("p", "v", cm, "1", asw.Mounted, false)}, podDirs: []asw.PodDir{{UID: "p"}}, populated: true, removed: gone("p")},
			[]string{"teardown p/v"}},
		{"empty directory of a gone pod is cleaned",
			snapshot{podDirs: []asw.PodDir{{UID: "p"}}, populated: true, removed: gone("p")},
			[]string{"cleanup p"}},
		{"a pod that is not desired, and whose removal does not count, keeps its volumes and directory",
			snapshot{actual: []asw.Volume{have("p", "v", cm, "1", asw.Mounted, false)}, podDirs: []asw.PodDir{{UID: "p"}, {UID: "q"}}, populated: true},
			[]string{}},
		{"directory of a wanted pod is kept",
			snapshot{desired: []dsw.Pod{pod("p")}, podDirs: []asw.PodDir{{UID: "p"}}, populated: true},
			[]string{}},
		{"reconstructed volume of an unknown pod waits for the sources",
			snapshot{actual: []asw.Volume{have("p", "v", cm, "", asw.Uncertain, true)}, podDirs: []asw.PodDir{{UID: "p", Reconstructed: true}}},
			[]string{}},
		{"reconstructed volume of a gone pod is torn down once populated",
			snapshot{actual: []asw.Volume{have("p", "v", cm, "", asw.Uncertain, true)}, podDirs: []asw.PodDir{{UID: "p", Reconstructed: true}}, populated: true, removed: gone("p")},
			[]string{"teardown p/v"}},
		{"reconstructed volume of a removed pod still waits for every source",
			snapshot{actual: []asw.Volume{have("p", "v", cm, "", asw.Uncertain, true)}, podDirs: []asw.PodDir{{UID: "p", Reconstructed: true}}, removed: gone("p")},
			[]string{}},
		{"volume mounted this run is torn down even before every source synced",
			snapshot{actual: []asw.Volume{have("p", "v", cm, "1", asw.Mounted, false)}, podDirs: []asw.PodDir{{UID: "p"}}, removed: gone("p")},
			[]string{"teardown p/v"}},
		{"volume removed from the spec of a desired pod is kept",
			snapshot{desired: []dsw.Pod{pod("p", want("a", cm, "1"))}, actual: []asw.Volume{have("p", "a", cm, "1", asw.Mounted, false), have("p", "b", ed, "1", asw.Mounted, false)}, populated: true},
			[]string{}},
		{"reconstructed volume missing from the spec of a desired pod is kept",
			snapshot{desired: []dsw.Pod{pod("p", want("a", cm, "1"))}, actual: []asw.Volume{have("p", "a", cm, "", asw.Uncertain, true), have("p", "b", ed, "", asw.Uncertain, true)}, podDirs: []asw.PodDir{{UID: "p", Reconstructed: true}}, populated: true},
			[]string{"setup p/a"}},
		{"volume that changed plugin is neither torn down nor set up again",
			snapshot{desired: []dsw.Pod{pod("p", want("v", cm, "1"))}, actual: []asw.Volume{have("p", "v", ed, "1", asw.Uncertain, false)}, populated: true},
			[]string{}},
		{"a spec problem never tears down a healthy volume",
			snapshot{desired: []dsw.Pod{pod("p", problem)}, actual: []asw.Volume{have("p", "v", cm, "1", asw.Mounted, false)}, populated: true},
			[]string{}},
		{"a volume with a problem is not attempted",
			snapshot{desired: []dsw.Pod{pod("p", problem)}, populated: true},
			[]string{}},
		{"teardowns come before setups",
			snapshot{desired: []dsw.Pod{pod("q", want("v", cm, "1"))}, actual: []asw.Volume{have("p", "v", cm, "1", asw.Mounted, false)}, podDirs: []asw.PodDir{{UID: "r"}}, populated: true, removed: gone("p", "r")},
			[]string{"teardown p/v", "cleanup r", "setup q/v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describe(plan(tt.s)); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("plan = %q, want %q", got, tt.want)
			}
		})
	}
}

// The actions of a pod name it for the logs: from the desired state, or
// from the actual state once the pod has left the desired state.
func TestPlanNamesPods(t *testing.T) {
	s := snapshot{
		desired:   []dsw.Pod{pod("web", want("v", cm, "1"))},
		actual:    []asw.Volume{have("gone", "v", cm, "1", asw.Mounted, false)},
		podDirs:   []asw.PodDir{{UID: "gone", Namespace: "team", Name: "db"}, {UID: "empty", Namespace: "team", Name: "old"}, {UID: "found", Reconstructed: true}},
		populated: true,
		removed:   gone("gone", "empty", "found"),
	}
	var got []string
	for _, a := range plan(s) {
		got = append(got, fmt.Sprintf("%s %s %s/%s", a.kind, a.pod, a.podNamespace, a.podName))
	}
	want := []string{"teardown gone team/db", "cleanup empty team/old", "cleanup found /", "setup web ns/web"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan = %q, want %q", got, want)
	}
}

// A volume known to be mounted writable whose spec now asks readOnly, or
// the reverse, is kept as set up: neither refreshed, nor set up again
// after a restart, nor torn down. One whose mount is not known (found on
// disk without one) is set up as its spec asks.
func TestPlanKeepsTheAccessOfASetUpVolume(t *testing.T) {
	readOnly := func(version string) dsw.Volume {
		v := want("v", lv, version)
		v.ReadOnly = true
		return v
	}
	mounted := func(state asw.State, reconstructed bool, access asw.Access) []asw.Volume {
		v := have("p", "v", lv, "1", state, reconstructed)
		v.Access = access
		return []asw.Volume{v}
	}
	for _, tc := range []struct {
		name string
		s    snapshot
		want []string
	}{
		{"edited to readOnly: not refreshed",
			snapshot{desired: []dsw.Pod{pod("p", readOnly("2"))}, actual: mounted(asw.Mounted, false, asw.ReadWrite), populated: true}, []string{}},
		{"edited to read-write: not refreshed",
			snapshot{desired: []dsw.Pod{pod("p", want("v", lv, "2"))}, actual: mounted(asw.Mounted, false, asw.ReadOnly), populated: true}, []string{}},
		{"found mounted writable, now readOnly: not set up again",
			snapshot{desired: []dsw.Pod{pod("p", readOnly("2"))}, actual: mounted(asw.Uncertain, true, asw.ReadWrite)}, []string{}},
		{"dead and edited: not set up again",
			snapshot{desired: []dsw.Pod{pod("p", readOnly("2"))}, actual: mounted(asw.Uncertain, false, asw.ReadWrite), populated: true}, []string{}},
		{"found mounted as asked: set up again",
			snapshot{desired: []dsw.Pod{pod("p", readOnly("1"))}, actual: mounted(asw.Uncertain, true, asw.ReadOnly)}, []string{"setup p/v"}},
		{"found without a mount: set up as asked",
			snapshot{desired: []dsw.Pod{pod("p", readOnly("1"))}, actual: mounted(asw.Uncertain, true, asw.AccessUnknown)}, []string{"setup p/v"}},
		{"as set up, new version: refreshed",
			snapshot{desired: []dsw.Pod{pod("p", readOnly("2"))}, actual: mounted(asw.Mounted, false, asw.ReadOnly), populated: true}, []string{"refresh p/v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(plan(tc.s)); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlanSkipsWaitingVolumes(t *testing.T) {
	waiting := want("v", cm, "1")
	waiting.Waiting = "configmaps ns/app: not yet read"
	for name, s := range map[string]snapshot{
		"not set up":                   {desired: []dsw.Pod{pod("p", waiting)}, populated: true},
		"not refreshed, not torn down": {desired: []dsw.Pod{pod("p", waiting)}, actual: []asw.Volume{have("p", "v", cm, "0", asw.Mounted, false)}, populated: true},
	} {
		if got := describe(plan(s)); len(got) != 0 {
			t.Errorf("%s: plan = %q, want nothing", name, got)
		}
	}
}
