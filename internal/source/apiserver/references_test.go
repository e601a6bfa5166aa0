package apiserver

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReferences(t *testing.T) {
	cm := func(name string) v1.VolumeSource {
		return v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
	}
	secret := func(name string) v1.VolumeSource {
		return v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}
	}
	projected := func(sources ...v1.VolumeProjection) v1.VolumeSource {
		return v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: sources}}
	}
	pCM := func(name string) v1.VolumeProjection {
		return v1.VolumeProjection{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
	}
	pSecret := func(name string) v1.VolumeProjection {
		return v1.VolumeProjection{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: name}}}
	}
	pod := func(ns string, sources ...v1.VolumeSource) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
		for _, s := range sources {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "v", VolumeSource: s})
		}
		return p
	}
	for _, tc := range []struct {
		name                string
		pods                []*v1.Pod
		configMaps, secrets map[ref]bool
	}{
		{"no pods", nil, map[ref]bool{}, map[ref]bool{}},
		{"configMap and secret volumes", []*v1.Pod{pod("ns", cm("c"), secret("s"))},
			map[ref]bool{{"ns", "c"}: true}, map[ref]bool{{"ns", "s"}: true}},
		{"projected sources", []*v1.Pod{pod("ns", projected(pCM("kube-root-ca.crt"), pSecret("ps"),
			v1.VolumeProjection{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
			v1.VolumeProjection{DownwardAPI: &v1.DownwardAPIProjection{}}))},
			map[ref]bool{{"ns", "kube-root-ca.crt"}: true}, map[ref]bool{{"ns", "ps"}: true}},
		{"duplicates across volumes and pods", []*v1.Pod{pod("ns", cm("c"), projected(pCM("c"))), pod("ns", cm("c"), secret("s"), secret("s"))},
			map[ref]bool{{"ns", "c"}: true}, map[ref]bool{{"ns", "s"}: true}},
		{"same name in two namespaces", []*v1.Pod{pod("a", cm("c")), pod("b", cm("c"))},
			map[ref]bool{{"a", "c"}: true, {"b", "c"}: true}, map[ref]bool{}},
		{"other volume types ignored", []*v1.Pod{pod("ns",
			v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}},
			v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}},
			v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}},
			v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}})},
			map[ref]bool{}, map[ref]bool{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cms, secrets := references(tc.pods)
			if !reflect.DeepEqual(cms, tc.configMaps) {
				t.Errorf("configMaps = %v, want %v", cms, tc.configMaps)
			}
			if !reflect.DeepEqual(secrets, tc.secrets) {
				t.Errorf("secrets = %v, want %v", secrets, tc.secrets)
			}
		})
	}
}
