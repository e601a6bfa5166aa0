package populator

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

func ephemeralVolume(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		}},
	}}}
}

// ownedBy makes claim c controlled (or only owned, controller false) by
// the pod named web with UID uid.
func ownedBy(c *v1.PersistentVolumeClaim, uid string, controller bool) *v1.PersistentVolumeClaim {
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: types.UID(uid), Controller: &controller}}
	return c
}

// An ephemeral volume uses the claim <pod>-<volume>, and only when the pod
// controls it, with the kubelet's reason otherwise.
func TestEphemeralVolumes(t *testing.T) {
	const notOwner = "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"
	tests := []struct {
		name    string
		claim   *v1.PersistentVolumeClaim // ns/web-scratch, or nil for none
		problem string                    // exact; empty for none
		waiting string                    // exact; empty for none
	}{
		{name: "owned and bound", claim: ownedBy(boundClaim("web-scratch", "pv-1"), "u1", true)},
		{name: "not created yet", waiting: "claim ns/web-scratch of the ephemeral volume is not created yet " +
			"(kube-controller-manager's ephemeral volume controller makes it from volumeClaimTemplate; from manifests, the agent does)"},
		{name: "no owner", claim: boundClaim("web-scratch", "pv-1"), problem: notOwner},
		{name: "owned by another pod of that name", claim: ownedBy(boundClaim("web-scratch", "pv-1"), "old-uid", true), problem: notOwner},
		{name: "owner but not controller", claim: ownedBy(boundClaim("web-scratch", "pv-1"), "u1", false), problem: notOwner},
		{name: "not owned and not bound: ownership first", claim: boundClaim("web-scratch", ""), problem: notOwner},
		{name: "owned, not bound yet", claim: ownedBy(boundClaim("web-scratch", ""), "u1", true), waiting: "claim ns/web-scratch is not bound yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objects := plugintest.Objects{Claims: map[string]*v1.PersistentVolumeClaim{}, PVs: map[string]*v1.PersistentVolume{
				"pv-1": localPV("pv-1", "web-scratch"),
			}}
			if tt.claim != nil {
				objects.Claims["ns/web-scratch"] = tt.claim
			}
			v := populateOne(t, "api", objects, ephemeralVolume("scratch"))
			if v.Claim != "web-scratch" || v.Problem != tt.problem || v.Waiting != tt.waiting {
				t.Fatalf("volume = %+v; want claim web-scratch, problem %q, waiting %q", v, tt.problem, tt.waiting)
			}
			if tt.problem == "" && tt.waiting == "" && (v.Plugin != local.Name || v.Name != "pv-1" || v.SpecName != "scratch" || v.Spec.PV == nil) {
				t.Fatalf("volume = %+v; want a local volume of pv-1, ready to set up", v)
			}
			if tt.problem == notOwner && v.Name != "scratch" {
				t.Errorf("volume name %q: a claim the pod does not own must not name its directory", v.Name)
			}
		})
	}
}
