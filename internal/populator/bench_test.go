package populator

import (
	"fmt"
	"testing"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func projectedVolume(name, configMap string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: configMap}}},
		{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
	}}}}
}
