package main

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// namespace holds every object of the benchmark.
const namespace = "bench"

// sharedConfigMap is referenced by every benchmark pod's projected volume,
// so that one update reaches every pod.
const sharedConfigMap = "shared"

// cluster is where pods and objects go: a manifest directory or an API
// server. Each call returns once the object is written (or created).
type cluster interface {
	putConfigMap(cm *v1.ConfigMap)
	putSecret(s *v1.Secret)
	putPod(p *v1.Pod)
	deletePod(p *v1.Pod)
	// uid is the UID the agent will know the pod by.
	uid(p *v1.Pod) string
}

// podObjects returns pod i of a run with its own ConfigMap and Secret: it
// has a configMap, a secret, an emptyDir and a projected volume (its
// ConfigMap, the shared one, its Secret and its labels), the four kinds a
// typical pod has.
func podObjects(run string, i int) (*v1.Pod, *v1.ConfigMap, *v1.Secret) {
	name := fmt.Sprintf("%s-%d", run, i)
	cm := &v1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data:       map[string]string{"config": fmt.Sprintf("value of %s\n", name)},
	}
	sec := &v1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data:       map[string][]byte{"password": []byte("s3cr3t-" + name)},
	}
	pod := newPod(name, []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: ref(name)}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "bundle", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: ref(name), Items: []v1.KeyToPath{{Key: "config", Path: "own"}}}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: ref(sharedConfigMap), Items: []v1.KeyToPath{{Key: "config", Path: "shared"}}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: ref(name)}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			}}},
		}}}},
	})
	return pod, cm, sec
}

// manyConfigMapsPod returns a pod with n configMap volumes, one per ConfigMap.
func manyConfigMapsPod(run string, n int) (*v1.Pod, []*v1.ConfigMap) {
	var vols []v1.Volume
	var cms []*v1.ConfigMap
	for i := range n {
		name := fmt.Sprintf("%s-%d", run, i)
		cms = append(cms, &v1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Data:       map[string]string{"config": "value of " + name + "\n"},
		})
		vols = append(vols, v1.Volume{Name: fmt.Sprintf("cm-%d", i),
			VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: ref(name)}}})
	}
	return newPod(run, vols), cms
}

func sharedObject(value string) *v1.ConfigMap {
	return &v1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: sharedConfigMap, Namespace: namespace},
		Data:       map[string]string{"config": value},
	}
}

func newPod(name string, vols []v1.Volume) *v1.Pod {
	no := false
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(name),
			Labels: map[string]string{"app": "bench", "pod": name}},
		Spec: v1.PodSpec{
			NodeName: benchNode,
			// No token volume: minting one per pod measures the TokenRequest
			// API, not the agent.
			AutomountServiceAccountToken: &no,
			Containers:                   []v1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:                      vols,
		},
	}
}

func ref(name string) v1.LocalObjectReference { return v1.LocalObjectReference{Name: name} }

// benchNode is the node the agent serves.
const benchNode = "bench-node"
