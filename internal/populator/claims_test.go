package populator

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
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

func TestClaimVolumes(t *testing.T) {
	block := v1.PersistentVolumeBlock
	tests := []struct {
		name    string
		claim   *v1.PersistentVolumeClaim // ns/data, or nil for none
		pv      *v1.PersistentVolume      // or nil for none
		wantKey string                    // the desired volume's name (its directory)
		problem string                    // a substring; empty for none
		waiting string                    // a substring; empty for none
	}{
		{name: "bound local PV", claim: boundClaim("data", "pv-1"), pv: localPV("pv-1", "data"), wantKey: "pv-1"},
		{name: "missing claim", wantKey: "vol", problem: "claim ns/data not found"},
		{name: "unbound claim", claim: boundClaim("data", ""), wantKey: "vol", waiting: "waiting for claim ns/data to be bound"},
		{name: "PV not there yet", claim: boundClaim("data", "pv-1"), wantKey: "pv-1", waiting: "PersistentVolume pv-1 not found yet"},
		{name: "PV not bound back yet", claim: boundClaim("data", "pv-1"), pv: func() *v1.PersistentVolume { pv := localPV("pv-1", "data"); pv.Spec.ClaimRef = nil; return pv }(),
			wantKey: "pv-1", waiting: "waiting for PersistentVolume pv-1 to be bound"},
		{name: "PV bound to another claim", claim: boundClaim("data", "pv-1"), pv: localPV("pv-1", "other"), wantKey: "pv-1", problem: "bound to claim ns/other"},
		{name: "PV bound to another claim of that name", claim: boundClaim("data", "pv-1"),
			pv: func() *v1.PersistentVolume { pv := localPV("pv-1", "data"); pv.Spec.ClaimRef.UID = "old"; return pv }(), wantKey: "pv-1", problem: "another claim of that name"},
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
		}(), pv: localPV("pv-1", "data"), wantKey: "pv-1", problem: "is being deleted"},
		{name: "block mode", claim: func() *v1.PersistentVolumeClaim {
			c := boundClaim("data", "pv-1")
			c.Spec.VolumeMode = &block
			return c
		}(),
			pv: func() *v1.PersistentVolume { pv := localPV("pv-1", "data"); pv.Spec.VolumeMode = &block; return pv }(), wantKey: "pv-1", problem: "volumeMode Block"},
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
			src := newSource("manifests", true, testPod("u1", "web", claimVolume("vol", "data")))
			src.objects = objects
			h := newHarness(t, src)
			h.p.Populate()
			pod, _ := h.desired.Pod("u1")
			if len(pod.Volumes) != 1 {
				t.Fatalf("volumes = %+v", pod.Volumes)
			}
			v := pod.Volumes[0]
			if v.Name != tt.wantKey || v.Claim != "data" {
				t.Errorf("volume name %q claim %q, want %q and data", v.Name, v.Claim, tt.wantKey)
			}
			if got := v.SpecName; (v.Name != "vol") != (got == "vol") {
				t.Errorf("SpecName = %q with name %q", got, v.Name)
			}
			switch {
			case tt.problem != "":
				if !strings.Contains(v.Problem, tt.problem) || v.Plugin != "" {
					t.Fatalf("volume = %+v; want problem %q and no plugin", v, tt.problem)
				}
			case tt.waiting != "":
				if !strings.Contains(v.Waiting, tt.waiting) || v.Problem != "" {
					t.Fatalf("volume = %+v; want waiting %q", v, tt.waiting)
				}
			default:
				if v.Problem != "" || v.Waiting != "" || v.Plugin != local.Name || v.PV != "pv-1" || v.Spec.PV == nil || v.Spec.Claim == nil {
					t.Fatalf("volume = %+v; want a local volume of pv-1, ready to set up", v)
				}
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
