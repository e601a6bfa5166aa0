package binder

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Builders of the objects the tests use. A claim is in namespace "default",
// asks for ReadWriteOnce, and has no class; a PersistentVolume offers
// ReadWriteOnce and has no class.

func newPV(name, size string, opts ...func(*v1.PersistentVolume)) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)},
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/" + name}},
		},
	}
	for _, o := range opts {
		o(pv)
	}
	return pv
}

func newClaim(name, size string, opts ...func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func pvClass(class string) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) { pv.Spec.StorageClassName = class }
}

func pvModes(modes ...v1.PersistentVolumeAccessMode) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) { pv.Spec.AccessModes = modes }
}

func pvVolumeMode(m v1.PersistentVolumeMode) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = &m }
}

func pvLabels(kv ...string) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) {
		pv.Labels = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			pv.Labels[kv[i]] = kv[i+1]
		}
	}
}

func pvClaimRef(namespace, name string, uid types.UID) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) {
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: namespace, Name: name, UID: uid}
	}
}

// pvOnNode requires the node label key to be value.
func pvOnNode(key, value string) func(*v1.PersistentVolume) {
	return func(pv *v1.PersistentVolume) {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: key, Operator: v1.NodeSelectorOpIn, Values: []string{value}}},
		}}}}
	}
}

func claimClass(class string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) { c.Spec.StorageClassName = &class }
}

func claimBetaClass(class string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) {
		c.Annotations = map[string]string{v1.BetaStorageClassAnnotation: class}
	}
}

func claimModes(modes ...v1.PersistentVolumeAccessMode) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) { c.Spec.AccessModes = modes }
}

func claimVolumeMode(m v1.PersistentVolumeMode) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeMode = &m }
}

func claimSelector(key, value string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) {
		c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
	}
}

func claimVolumeName(pv string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeName = pv }
}

func claimUID(uid types.UID) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) { c.UID = uid }
}

// podUsing returns a running pod of namespace "default" that uses claims.
func podUsing(name string, claims ...string) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
	for _, c := range claims {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c},
		}})
	}
	return pod
}
