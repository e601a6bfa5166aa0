package populator

import (
	"maps"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func claimVolume(name, claim string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func boundClaim(name, pv string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1.PersistentVolumeClaimSpec{VolumeName: pv},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound},
	}
}

// csiPV is a CSI PV of the local driver on node-1, bound to claim
// ns/claim, of the volume handle ns-claim-name.
func csiPV(name, claim string) *v1.PersistentVolume {
	pv := localPV(name, claim)
	pv.Spec.Local = nil
	pv.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: "local.volume-agent.io", VolumeHandle: "ns-" + claim + "-" + name}
	return pv
}

// localPV is a local PV on node-1, bound to claim ns/claim.
func localPV(name, claim string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/disks/" + name}},
			ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: claim, UID: types.UID("uid-" + claim)},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-1"}}},
			}}}},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound},
	}
}

func ptr[T any](v T) *T { return &v }

// blockClaim is ns/data of volumeMode Block, bound to pv-1.
func blockClaim() *v1.PersistentVolumeClaim {
	c := boundClaim("data", "pv-1")
	c.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
	return c
}

// blockPV is the local PV pv-1 of volumeMode Block, bound to ns/data.
func blockPV() *v1.PersistentVolume {
	pv := localPV("pv-1", "data")
	pv.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
	return pv
}

// populateOne populates pod ns/web (u1) with the one volume vol and the
// given containers, from a source of that name over objects, and returns
// its desired volume.
func populateOne(t *testing.T, source string, objects plugintest.Objects, vol v1.Volume, containers ...v1.Container) dsw.Volume {
	t.Helper()
	pod := testPod("u1", "web", vol)
	pod.Spec.Containers = containers
	src := newSource(source, true, pod)
	src.objects = objects
	h := newHarness(t, src)
	h.p.Populate()
	got, _ := h.desired.Pod("u1")
	if len(got.Volumes) != 1 {
		t.Fatalf("volumes = %+v", got.Volumes)
	}
	return got.Volumes[0]
}

func TestClaimVolumes(t *testing.T) {
	block := v1.PersistentVolumeBlock
	tests := []struct {
		name    string
		claim   *v1.PersistentVolumeClaim // ns/data, or nil for none
		pv      *v1.PersistentVolume      // or nil for none
		wantKey string                    // the desired volume's name (its directory)
		problem string                    // a substring; empty for none
		waiting string                    // a substring; empty for none
		// containers of the pod; block: the volume is to be published as a device.
		containers []v1.Container
		block      bool
		// plugin serves the volume; "" for local.Name.
		plugin string
		// deleting: the claim is being deleted; its volume keeps its PV and
		// plugin, never to be set up anew.
		deleting bool
	}{
		{name: "bound local PV", claim: boundClaim("data", "pv-1"), pv: localPV("pv-1", "data"), wantKey: "pv-1"},
		{name: "bound CSI PV of the local driver", claim: boundClaim("data", "pv-1"), pv: csiPV("pv-1", "data"), wantKey: "pv-1", plugin: local.CSIName},
		{name: "CSI PV of the local driver, block mode", claim: blockClaim(), pv: func() *v1.PersistentVolume {
			pv := csiPV("pv-1", "data")
			pv.Spec.VolumeMode = ptr(v1.PersistentVolumeBlock)
			return pv
		}(), wantKey: "pv-1", plugin: local.CSIName, block: true},
		{name: "CSI PV of the local driver with a forged handle", claim: boundClaim("data", "pv-1"), pv: func() *v1.PersistentVolume {
			pv := csiPV("pv-1", "data")
			pv.Spec.CSI.VolumeHandle = "../etc"
			return pv
		}(), wantKey: "pv-1", problem: `PersistentVolume pv-1: spec.csi.volumeHandle "../etc" contains '/'`},
		{name: "missing claim", wantKey: "vol", problem: "claim ns/data not found"},
		{name: "unbound claim", claim: boundClaim("data", ""), wantKey: "vol", waiting: "claim ns/data is not bound yet"},
		{name: "unbound claim, with the binder's reason", claim: func() *v1.PersistentVolumeClaim {
			c := boundClaim("data", "")
			c.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: volume.ClaimNotBound, Status: v1.ConditionTrue,
				Message: `no PersistentVolume fits claim ns/data (1 checked: pv-a: too small (1Gi < 5Gi))`}}
			return c
		}(), wantKey: "vol", waiting: `claim ns/data is not bound yet: no PersistentVolume fits claim ns/data (1 checked: pv-a: too small (1Gi < 5Gi))`},
		{name: "PV not there yet", claim: boundClaim("data", "pv-1"), wantKey: "pv-1", waiting: "PersistentVolume pv-1 not found yet"},
		{name: "PV not bound back yet", claim: boundClaim("data", "pv-1"), pv: func() *v1.PersistentVolume { pv := localPV("pv-1", "data"); pv.Spec.ClaimRef = nil; return pv }(),
			wantKey: "pv-1", waiting: "PersistentVolume pv-1 is not bound to claim ns/data yet"},
		{name: "PV bound to another claim", claim: boundClaim("data", "pv-1"), pv: localPV("pv-1", "other"), wantKey: "pv-1", problem: "bound to claim ns/other"},
		{name: "PV bound to another claim of that name", claim: boundClaim("data", "pv-1"),
			pv: func() *v1.PersistentVolume { pv := localPV("pv-1", "data"); pv.Spec.ClaimRef.UID = "old"; return pv }(), wantKey: "pv-1", problem: "another claim of that name"},
		{name: "PV bound to the claim's name only: not this claim's by identity", claim: boundClaim("data", "pv-1"),
			pv: func() *v1.PersistentVolume { pv := localPV("pv-1", "data"); pv.Spec.ClaimRef.UID = ""; return pv }(), wantKey: "pv-1",
			waiting: "its claimRef has no uid"},
		{name: "a claim without a uid is not the one a claimRef with a uid names", claim: func() *v1.PersistentVolumeClaim { c := boundClaim("data", "pv-1"); c.UID = ""; return c }(),
			pv: localPV("pv-1", "data"), wantKey: "pv-1", problem: "another claim of that name"},
		{name: "a manifest claim without a uid, bound by the binder", claim: func() *v1.PersistentVolumeClaim { c := boundClaim("data", "pv-1"); c.UID = ""; return c }(),
			pv: func() *v1.PersistentVolume { pv := localPV("pv-1", "data"); pv.Spec.ClaimRef.UID = ""; return pv }(), wantKey: "pv-1"},
		{name: "lost claim", claim: func() *v1.PersistentVolumeClaim {
			c := boundClaim("data", "pv-1")
			c.Status.Phase = v1.ClaimLost
			return c
		}(),
			wantKey: "pv-1", problem: "is Lost"},
		{name: "claim being deleted", claim: func() *v1.PersistentVolumeClaim {
			c := boundClaim("data", "pv-1")
			c.DeletionTimestamp = &metav1.Time{}
			return c
		}(), pv: localPV("pv-1", "data"), wantKey: "pv-1", problem: "claim ns/data is being deleted", deleting: true},
		{name: "claim removed from the manifests, its binding kept", claim: func() *v1.PersistentVolumeClaim {
			c := boundClaim("data", "pv-1")
			c.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: volume.ClaimRemoved, Status: v1.ConditionTrue,
				Message: "removed from the manifests but not released: a pod that is not terminated still names it"}}
			return c
		}(), pv: localPV("pv-1", "data"), wantKey: "pv-1", deleting: true,
			problem: "claim ns/data removed from the manifests but not released: a pod that is not terminated still names it"},
		{name: "block mode", claim: blockClaim(), pv: blockPV(), wantKey: "pv-1", block: true,
			containers: []v1.Container{{Name: "app", VolumeDevices: []v1.VolumeDevice{{Name: "vol", DevicePath: "/dev/xvda"}}}}},
		{name: "block mode, used by no container", claim: blockClaim(), pv: blockPV(), wantKey: "pv-1", block: true},
		{name: "block mode in volumeMounts", claim: blockClaim(), pv: blockPV(), wantKey: "pv-1",
			containers: []v1.Container{
				{Name: "dev", VolumeDevices: []v1.VolumeDevice{{Name: "vol", DevicePath: "/dev/xvda"}}},
				{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "vol", MountPath: "/data"}}},
			},
			problem: `pod ns/web: volume "vol" has volumeMode Block, but container "app" uses it in volumeMounts`},
		{name: "filesystem mode in volumeDevices", claim: boundClaim("data", "pv-1"), pv: localPV("pv-1", "data"), wantKey: "pv-1",
			containers: []v1.Container{{Name: "app", VolumeDevices: []v1.VolumeDevice{{Name: "vol", DevicePath: "/dev/xvda"}}}},
			problem:    `pod ns/web: volume "vol" has volumeMode Filesystem, but container "app" uses it in volumeDevices`},
		{name: "volume mode mismatch", claim: func() *v1.PersistentVolumeClaim {
			c := boundClaim("data", "pv-1")
			c.Spec.VolumeMode = &block
			return c
		}(),
			pv: localPV("pv-1", "data"), wantKey: "pv-1", problem: "asks for volumeMode Block"},
		{name: "unsupported PV type", claim: boundClaim("data", "pv-1"), pv: func() *v1.PersistentVolume {
			pv := localPV("pv-1", "data")
			pv.Spec.Local, pv.Spec.CSI = nil, &v1.CSIPersistentVolumeSource{Driver: "x"}
			return pv
		}(), wantKey: "pv-1", problem: "PersistentVolume pv-1: csi volumes are not supported"},
		{name: "node affinity names another node", claim: boundClaim("data", "pv-1"), pv: func() *v1.PersistentVolume {
			pv := localPV("pv-1", "data")
			pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = []string{"node-2"}
			return pv
		}(), wantKey: "pv-1", problem: "node affinity check failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{}, PVs: map[string]*v1.PersistentVolume{}}
			if tt.claim != nil {
				objects.Claims["ns/data"] = tt.claim
			}
			if tt.pv != nil {
				objects.PVs[tt.pv.Name] = tt.pv
			}
			v := populateOne(t, "manifests", objects, claimVolume("vol", "data"), tt.containers...)
			if v.Name != tt.wantKey || v.Claim != "data" {
				t.Errorf("volume name %q claim %q, want %q and data", v.Name, v.Claim, tt.wantKey)
			}
			if got := v.SpecName; (v.Name != "vol") != (got == "vol") {
				t.Errorf("SpecName = %q with name %q", got, v.Name)
			}
			switch {
			case tt.problem != "":
				if !strings.Contains(v.Problem, tt.problem) || (v.Plugin != "") != tt.deleting || v.Deleting != tt.deleting {
					t.Fatalf("volume = %+v; want problem %q, deleting %v, a plugin only then", v, tt.problem, tt.deleting)
				}
			case tt.waiting != "":
				if !strings.Contains(v.Waiting, tt.waiting) || v.Problem != "" {
					t.Fatalf("volume = %+v; want waiting %q", v, tt.waiting)
				}
			default:
				plugin := tt.plugin
				if plugin == "" {
					plugin = local.Name
				}
				if v.Problem != "" || v.Waiting != "" || v.Plugin != plugin || v.PV != "pv-1" || v.Spec.PV == nil || v.Spec.Claim == nil || v.Block != tt.block {
					t.Fatalf("volume = %+v; want a volume of pv-1 served by %s, ready to set up", v, plugin)
				}
			}
		})
	}
}

// A claim bound to a CSI PV of the local driver, on an agent without the
// local provisioner, fails saying how to start the agent; it is not
// Unsupported (a volume type the agent lacks).
func TestCSIPVWithoutLocalRoot(t *testing.T) {
	src := newSource("manifests", true, testPod("u1", "web", claimVolume("vol", "data")))
	src.objects = plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": boundClaim("data", "pv-1")},
		PVs: map[string]*v1.PersistentVolume{"pv-1": csiPV("pv-1", "data")}}
	h := newHarnessOf(t, plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"}), src)
	h.p.Populate()
	v := h.volume(t, "u1", "pv-1")
	if !strings.Contains(v.Problem, "--provisioners local") || !strings.Contains(v.Problem, "--local-path-root") || v.Unsupported || v.Plugin != "" {
		t.Fatalf("volume = %+v; want a problem saying to start the agent with --provisioners local and --local-path-root", v)
	}
}

// A volume that is not a claim's cannot be used in volumeDevices: it fails,
// naming the pod, the container and the volume.
func TestInlineVolumeInVolumeDevices(t *testing.T) {
	pod := testPod("u1", "web", emptyDirVolume("scratch"))
	pod.Spec.InitContainers = []v1.Container{{Name: "init", VolumeDevices: []v1.VolumeDevice{{Name: "scratch", DevicePath: "/dev/xvda"}}}}
	h := newHarness(t, newSource("manifests", true, pod))
	h.p.Populate()
	got, _ := h.desired.Pod("u1")
	want := `pod ns/web: container "init" uses volume "scratch" in volumeDevices`
	if len(got.Volumes) != 1 || !strings.Contains(got.Volumes[0].Problem, want) || got.Volumes[0].Plugin != "" {
		t.Fatalf("volumes = %+v, want one failing with %q", got.Volumes, want)
	}
}

// A set-up volume whose PersistentVolume's volumeMode changed under the
// running pod is kept as it was set up.
func TestVolumeModeOfARunningPodCannotChange(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setUpBlock bool
		pv         *v1.PersistentVolume
		claim      *v1.PersistentVolumeClaim
	}{
		{"filesystem to block", false, blockPV(), blockClaim()},
		{"block to filesystem", true, localPV("pv-1", "data"), boundClaim("data", "pv-1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource("manifests", true, testPod("u1", "web", claimVolume("vol", "data")))
			src.objects = plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": tc.claim}, PVs: map[string]*v1.PersistentVolume{"pv-1": tc.pv}}
			h, actual := withActual(t, src)
			actual.Set(asw.Volume{PodUID: "u1", Name: "pv-1", Plugin: local.Name, State: asw.Mounted, Block: tc.setUpBlock})
			h.p.Populate()
			got, _ := h.desired.Pod("u1")
			if len(got.Volumes) != 1 || !strings.Contains(got.Volumes[0].Problem, "changed from volumeMode") || got.Volumes[0].Block != tc.setUpBlock || got.Volumes[0].Plugin != "" {
				t.Fatalf("volumes = %+v, want the set-up volume kept", got.Volumes)
			}
		})
	}
}

// Two volumes of a pod on one claim would share one directory: the second
// fails, the first is served.
func TestTwoVolumesOfOneClaim(t *testing.T) {
	objects := plugintest.Objects{
		Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": boundClaim("data", "pv-1")},
		PVs:    map[string]*v1.PersistentVolume{"pv-1": localPV("pv-1", "data")},
	}
	src := newSource("manifests", true, testPod("u1", "web", claimVolume("a", "data"), claimVolume("b", "data")))
	src.objects = objects
	h := newHarness(t, src)
	h.p.Populate()
	pod, _ := h.desired.Pod("u1")
	var problems []dsw.Volume
	for _, v := range pod.Volumes {
		if v.Problem != "" {
			problems = append(problems, v)
		}
	}
	if len(pod.Volumes) != 2 || len(problems) != 1 || problems[0].SpecName != "b" || !strings.Contains(problems[0].Problem, "share the directory") {
		t.Fatalf("volumes = %+v; want b refused for sharing pv-1's directory with a", pod.Volumes)
	}
}

func readOnlyClaimVolume(name, claim string) v1.Volume {
	v := claimVolume(name, claim)
	v.PersistentVolumeClaim.ReadOnly = true
	return v
}

// bySpecName returns the desired volumes of pod u1 by their names in the
// spec.
func bySpecName(t *testing.T, h *harness) map[string]dsw.Volume {
	t.Helper()
	pod, ok := h.desired.Pod("u1")
	if !ok {
		t.Fatal("pod u1 is not desired")
	}
	out := map[string]dsw.Volume{}
	for _, v := range pod.Volumes {
		name := v.SpecName
		if name == "" {
			name = v.Name
		}
		if _, dup := out[name]; dup {
			t.Fatalf("two desired volumes of the spec's volume %q: %+v", name, pod.Volumes)
		}
		out[name] = v
	}
	return out
}

// oneClaimObjects holds claim ns/data bound to the local PV pv-1.
func oneClaimObjects() plugintest.Objects {
	return plugintest.Objects{
		Claims: map[string]*v1.PersistentVolumeClaim{"ns/data": boundClaim("data", "pv-1")},
		PVs:    map[string]*v1.PersistentVolume{"pv-1": localPV("pv-1", "data")},
	}
}

// A PersistentVolume is mounted once per pod, in the directory named after
// it. Two volumes of one claim with the same readOnly share it, as before.
// Volumes of one claim that differ in readOnly cannot: each would be shown
// at the one mount, and a readOnly volume at a writable one. They all fail,
// in whatever order the spec lists them, with an error naming them, the
// claim and why; so does a claim whose PV is named like another volume.
func TestClaimUsedTwice(t *testing.T) {
	const readOnlyConflict = `both use claim ns/data, and only "b" is readOnly`
	tests := []struct {
		name     string
		vols     []v1.Volume
		served   []string          // volumes set up, without a problem
		problems map[string]string // volume → a substring of its problem
		conflict bool              // whether every volume with a problem is a Conflict
	}{
		{name: "read-write twice: the second shares the first's directory, as before",
			vols:     []v1.Volume{claimVolume("a", "data"), claimVolume("b", "data")},
			served:   []string{"a"},
			problems: map[string]string{"b": `volume "b" would share the directory "pv-1" with volume "a"`}},
		{name: "read-only twice: the second shares the first's directory, as before",
			vols:     []v1.Volume{readOnlyClaimVolume("a", "data"), readOnlyClaimVolume("b", "data")},
			served:   []string{"a"},
			problems: map[string]string{"b": `volume "b" would share the directory "pv-1" with volume "a"`}},
		{name: "read-write, then read-only: both fail",
			vols:     []v1.Volume{claimVolume("a", "data"), readOnlyClaimVolume("b", "data")},
			problems: map[string]string{"a": `volumes "a" and "b" ` + readOnlyConflict, "b": `volumes "a" and "b" ` + readOnlyConflict},
			conflict: true},
		{name: "read-only, then read-write: both fail",
			vols:     []v1.Volume{readOnlyClaimVolume("b", "data"), claimVolume("a", "data")},
			problems: map[string]string{"a": `volumes "b" and "a" ` + readOnlyConflict, "b": `volumes "b" and "a" ` + readOnlyConflict},
			conflict: true},
		{name: "three volumes, one read-only: all fail, each naming one that differs",
			vols: []v1.Volume{claimVolume("a", "data"), readOnlyClaimVolume("b", "data"), claimVolume("c", "data")},
			problems: map[string]string{"a": `volumes "a" and "b" ` + readOnlyConflict, "b": `volumes "a" and "b" ` + readOnlyConflict,
				"c": `volumes "b" and "c" both use claim ns/data, and only "b" is readOnly`},
			conflict: true},
		{name: "a claim whose PV is named like an emptyDir of the pod: both fail",
			vols: []v1.Volume{emptyDirVolume("pv-1"), claimVolume("a", "data")},
			problems: map[string]string{"pv-1": `volumes "pv-1" and "a" would share the directory "pv-1"`,
				"a": `volumes "pv-1" and "a" would share the directory "pv-1"`},
			conflict: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource("manifests", true, testPod("u1", "web", tt.vols...))
			src.objects = oneClaimObjects()
			h := newHarness(t, src)
			h.p.Populate()
			got := bySpecName(t, h)
			if len(got) != len(tt.vols) {
				t.Fatalf("volumes = %+v; want one per volume of the spec", got)
			}
			for _, name := range tt.served {
				if v := got[name]; v.Problem != "" || v.Plugin == "" || v.Conflict {
					t.Errorf("volume %s = %+v; want it set up", name, v)
				}
			}
			for name, problem := range tt.problems {
				v := got[name]
				if !strings.Contains(v.Problem, problem) || v.Plugin != "" || v.Spec != nil || v.Conflict != tt.conflict {
					t.Errorf("volume %s = %+v; want problem %q, no plugin, conflict %v", name, v, problem, tt.conflict)
				}
			}
		})
	}
}

// What the pod's earlier spec set up in the directory of two volumes of one
// claim that differ in readOnly — before an edit, or found on disk after a
// restart — changes nothing: both fail, neither is shown with it, and it is
// not kept as a volume of its own (which would show it, and count it ready).
func TestClaimUsedTwiceOverAVolumeSetUpBefore(t *testing.T) {
	for _, reconstructed := range []bool{false, true} {
		src := newSource("manifests", true, testPod("u1", "web", readOnlyClaimVolume("b", "data"), claimVolume("a", "data")))
		src.objects = oneClaimObjects()
		h, actual := withActual(t, src)
		state := asw.Mounted
		if reconstructed {
			state = asw.Uncertain
		}
		actual.Set(asw.Volume{PodUID: "u1", Name: "pv-1", Plugin: local.Name, State: state, Reconstructed: reconstructed})
		h.p.Populate()
		got := bySpecName(t, h)
		if len(got) != 2 || !got["a"].Conflict || !got["b"].Conflict || got["a"].Plugin != "" || got["b"].Plugin != "" {
			t.Fatalf("(reconstructed %v) volumes = %+v; want a and b in conflict, nothing kept", reconstructed, got)
		}
	}
}

// Each volume's problem is reported once, though volumes of the spec with
// one directory have one key in the desired state, and the two volumes of a
// conflict have the same problem.
func TestProblemsOfOneDirectoryReportedOncePerVolume(t *testing.T) {
	src := newSource("api", true,
		testPod("u1", "conflict", claimVolume("a", "data"), readOnlyClaimVolume("b", "data")),
		testPod("u2", "shared", claimVolume("a", "data"), claimVolume("b", "data")),
		testPod("u3", "duplicate", emptyDirVolume("a"), configMapVolume("a", "app")))
	src.objects = oneClaimObjects()
	rec := &problems{}
	h := newHarness(t, src)
	h.p.cfg.Recorder = rec
	for range 3 {
		h.p.PopulateAll()
	}
	got := map[string]int{}
	for _, msg := range rec.msgs {
		got[msg[:strings.Index(msg, ": ")]]++
	}
	want := map[string]int{"conflict/a": 1, "conflict/b": 1, "shared/b": 1, "duplicate/a": 2}
	if !maps.Equal(got, want) {
		t.Fatalf("events = %q; want one per volume with a problem", rec.msgs)
	}
}
