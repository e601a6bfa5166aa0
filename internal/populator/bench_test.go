package populator

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/source"
)

// BenchmarkPopulateNode measures one full populator pass over a node with
// 110 pods (the kubelet's default maximum), each with an emptyDir, two
// configMap volumes, a secret-free projected volume and a downwardAPI
// volume: the work done after any change on the node.
func BenchmarkPopulateNode(b *testing.B) {
	src := newSource("manifests", true)
	for i := range 110 {
		cm := fmt.Sprintf("cm-%d", i%20)
		src.configMaps["ns/"+cm] = &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: cm, ResourceVersion: "1"}, Data: map[string]string{"k": "v"}}
		src.pods = append(src.pods, testPod(fmt.Sprintf("uid-%d", i), fmt.Sprintf("pod-%d", i),
			emptyDirVolume("scratch"), configMapVolume("a", cm), configMapVolume("b", "cm-0"),
			projectedVolume("all", cm), labelVolume("labels", "app")))
	}
	p := New(Config{Sources: []source.Source{src}, Desired: dsw.New(nil),
		Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"}), Logger: zap.NewNop()})
	b.ReportAllocs()
	for b.Loop() {
		p.Populate()
	}
}

// BenchmarkPopulateEvent measures the pass that follows one event on a node
// of 110 and 1,000 pods with four volumes each (configMap, secret, emptyDir,
// projected), each pod with its own ConfigMap and Secret: nothing changed
// (the resync), one pod changed, or one ConfigMap changed.
func BenchmarkPopulateEvent(b *testing.B) {
	for _, pods := range []int{110, 1000} {
		for _, event := range []string{"none", "pod", "configMap"} {
			b.Run(fmt.Sprintf("pods=%d/event=%s", pods, event), func(b *testing.B) {
				src := benchNode(pods)
				p := New(Config{Sources: []source.Source{src}, Desired: dsw.New(nil),
					Plugins: plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"}), Logger: zap.NewNop()})
				p.Populate()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					benchEvent(src, event, i%pods, i)
					p.Populate()
					i++
				}
			})
		}
	}
}

// benchNode returns a synced source with n pods of four volumes each.
func benchNode(n int) *fakeSource {
	src := newSource("manifests", true)
	src.node = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	for i := range n {
		name := fmt.Sprintf("pod-%d", i)
		src.configMaps["ns/"+name] = benchConfigMap(name, "1")
		src.secrets["ns/"+name] = &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("s-" + name), ResourceVersion: "1"},
			Data: map[string][]byte{"password": []byte("secret")}}
		src.pods = append(src.pods, benchPod(name, "1"))
	}
	return src
}

func benchPod(name, resourceVersion string) *v1.Pod {
	pod := testPod("uid-"+name, name, emptyDirVolume("scratch"), configMapVolume("config", name),
		v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}},
		projectedVolume("all", name))
	pod.ResourceVersion = resourceVersion
	return pod
}

func benchConfigMap(name, resourceVersion string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("c-" + name), ResourceVersion: resourceVersion},
		Data: map[string]string{"config.yaml": "key: value"}}
}

// benchEvent applies one change to pod i (or its ConfigMap), as a source
// would: a new object, never one changed in place.
func benchEvent(src *fakeSource, event string, i, round int) {
	src.mu.Lock()
	defer src.mu.Unlock()
	name := fmt.Sprintf("pod-%d", i)
	switch event {
	case "pod":
		pod := src.pods[i].DeepCopy()
		pod.ResourceVersion = fmt.Sprint(round + 2)
		pod.Labels["round"] = fmt.Sprint(round)
		src.pods[i] = pod
	case "configMap":
		src.configMaps["ns/"+name] = benchConfigMap(name, fmt.Sprint(round+2))
	}
}

func projectedVolume(name, configMap string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: configMap}}},
		{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
	}}}}
}
