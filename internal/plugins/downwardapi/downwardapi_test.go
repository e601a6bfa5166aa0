package downwardapi_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func testPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "ns", UID: "uid-1",
			Labels:      map[string]string{"tier": "a \"quoted\"\nvalue", "app": "web"},
			Annotations: map[string]string{"b": "2", "a": "1"},
		},
		Spec: v1.PodSpec{Containers: []v1.Container{
			{Name: "app", Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("256Mi")},
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("128Mi")},
			}},
			{Name: "sidecar"},
		}},
	}
}

var allocatable = v1.ResourceList{
	v1.ResourceCPU:              resource.MustParse("4"),
	v1.ResourceMemory:           resource.MustParse("8Gi"),
	v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
}

func field(path string) v1.DownwardAPIVolumeFile {
	return v1.DownwardAPIVolumeFile{Path: "f", FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}
}

func res(container, name, divisor string) v1.DownwardAPIVolumeFile {
	ref := &v1.ResourceFieldSelector{ContainerName: container, Resource: name}
	if divisor != "" {
		ref.Divisor = resource.MustParse(divisor)
	}
	return v1.DownwardAPIVolumeFile{Path: "f", ResourceFieldRef: ref}
}

func TestPayloadValues(t *testing.T) {
	for _, tc := range []struct {
		item v1.DownwardAPIVolumeFile
		want string
	}{
		{field("metadata.name"), "web"},
		{field("metadata.namespace"), "ns"},
		{field("metadata.uid"), "uid-1"},
		{field("metadata.labels"), `app="web"` + "\n" + `tier="a \"quoted\"\nvalue"`},
		{field("metadata.annotations"), `a="1"` + "\n" + `b="2"`},
		{field("metadata.labels['app']"), "web"},
		{field("metadata.annotations['b']"), "2"},
		{field("metadata.labels['missing']"), ""},
		{res("app", "limits.cpu", "1m"), "500"},
		{res("app", "limits.cpu", ""), "1"}, // 0.5 cpu, rounded up
		{res("app", "requests.cpu", "1m"), "250"},
		{res("app", "requests.memory", "1Mi"), "128"},
		{res("app", "limits.memory", ""), "268435456"},
		{res("sidecar", "limits.memory", "1Gi"), "8"}, // no limit: node allocatable
		{res("sidecar", "limits.cpu", "1m"), "4000"},
		{res("sidecar", "limits.ephemeral-storage", "1Gi"), "100"},
		{res("sidecar", "requests.cpu", ""), "0"},
	} {
		name := fieldPath(tc.item)
		payload, err := downwardapi.Payload(testPod(), allocatable, []v1.DownwardAPIVolumeFile{tc.item}, 0o644)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := string(payload["f"].Data); got != tc.want {
			t.Errorf("%s = %q, want %q", name, got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func fieldPath(it v1.DownwardAPIVolumeFile) string {
	if it.FieldRef != nil {
		return it.FieldRef.FieldPath
	}
	r := it.ResourceFieldRef
	return r.ContainerName + " " + r.Resource + "/" + r.Divisor.String()
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		items   []v1.DownwardAPIVolumeFile
		wantErr string
	}{
		{"supported fields", []v1.DownwardAPIVolumeFile{field("metadata.name"), field("metadata.labels['a/b']"), res("app", "limits.hugepages-2Mi", "")}, ""},
		{"spec.nodeName", []v1.DownwardAPIVolumeFile{field("spec.nodeName")}, `fieldPath "spec.nodeName" is not supported`},
		{"status.podIP", []v1.DownwardAPIVolumeFile{field("status.podIP")}, `fieldPath "status.podIP" is not supported`},
		{"empty subscript", []v1.DownwardAPIVolumeFile{field("metadata.labels['']")}, "is not supported"},
		{"no containerName", []v1.DownwardAPIVolumeFile{res("", "limits.cpu", "")}, "containerName is required"},
		{"unknown container", []v1.DownwardAPIVolumeFile{res("nope", "limits.cpu", "")}, `container "nope" is not in the pod`},
		{"unknown resource", []v1.DownwardAPIVolumeFile{res("app", "limits.nvidia.com/gpu", "")}, `resource "limits.nvidia.com/gpu" is not supported`},
		{"resource without kind", []v1.DownwardAPIVolumeFile{res("app", "cpu", "")}, `resource "cpu" is not supported`},
		{"negative divisor", []v1.DownwardAPIVolumeFile{res("app", "limits.cpu", "-1")}, "divisor"},
		{"both refs", []v1.DownwardAPIVolumeFile{{Path: "f", FieldRef: field("metadata.name").FieldRef, ResourceFieldRef: res("app", "limits.cpu", "").ResourceFieldRef}}, "mutually exclusive"},
		{"no ref", []v1.DownwardAPIVolumeFile{{Path: "f"}}, "one of fieldRef or resourceFieldRef is required"},
		{"path escapes", []v1.DownwardAPIVolumeFile{{Path: "../f", FieldRef: field("metadata.name").FieldRef}}, "downwardAPI.items[0].path"},
		{"mode", []v1.DownwardAPIVolumeFile{{Path: "f", Mode: ptr[int32](0o1000), FieldRef: field("metadata.name").FieldRef}}, "downwardAPI.items[0].mode"},
	} {
		err := (&downwardapi.Plugin{}).Validate(spec(testPod(), tc.items...))
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate = %v, want error containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func spec(pod *v1.Pod, items ...v1.DownwardAPIVolumeFile) *volume.Spec {
	return &volume.Spec{Pod: pod, Volume: &v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: items}}}}
}

func TestSetUp(t *testing.T) {
	labels := field("metadata.labels")
	labels.Path = "meta/labels"
	memory := res("sidecar", "limits.memory", "1Mi")
	memory.Path, memory.Mode = "memory", ptr[int32](0o400)
	s := spec(testPod(), labels, memory)
	s.Volume.DownwardAPI.DefaultMode = ptr[int32](0o640)
	s.Node = &v1.Node{Status: v1.NodeStatus{Allocatable: allocatable}}
	dir := filepath.Join(t.TempDir(), "vol")
	if _, err := (&downwardapi.Plugin{Mounter: &mount.Fake{}}).SetUp(context.Background(), s, dir); err != nil {
		t.Fatal(err)
	}
	plugintest.CheckFiles(t, dir, map[string]plugintest.File{
		"meta/labels": {Data: `app="web"` + "\n" + `tier="a \"quoted\"\nvalue"`, Mode: 0o640},
		"memory":      {Data: "8192", Mode: 0o400},
	})
}

func TestAllocatableWithoutNode(t *testing.T) {
	for _, node := range []*v1.Node{nil, {}} {
		a := downwardapi.Allocatable(node)
		if cpu := a[v1.ResourceCPU]; cpu.Value() != int64(runtime.NumCPU()) {
			t.Errorf("cpu = %s, want this machine's %d", cpu.String(), runtime.NumCPU())
		}
		if mem := a[v1.ResourceMemory]; mem.Sign() <= 0 {
			t.Errorf("memory = %s, want this machine's memory", mem.String())
		}
	}
}

func TestContentVersion(t *testing.T) {
	p := &downwardapi.Plugin{}
	version := func(pod *v1.Pod, items ...v1.DownwardAPIVolumeFile) string {
		t.Helper()
		v, err := p.ContentVersion(spec(pod, items...))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		item   v1.DownwardAPIVolumeFile
		change func(*v1.Pod)
		want   bool // version changes
	}{
		{"referenced label", field("metadata.labels['app']"), func(p *v1.Pod) { p.Labels["app"] = "api" }, true},
		{"unreferenced label", field("metadata.labels['app']"), func(p *v1.Pod) { p.Labels["other"] = "x" }, false},
		{"annotation, labels referenced", field("metadata.labels"), func(p *v1.Pod) { p.Annotations["c"] = "3" }, false},
		{"any label, all referenced", field("metadata.labels"), func(p *v1.Pod) { p.Labels["other"] = "x" }, true},
		{"annotation", field("metadata.annotations"), func(p *v1.Pod) { delete(p.Annotations, "a") }, true},
		{"resource limit", res("app", "limits.cpu", "1m"), func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("1")
		}, true},
	} {
		pod := testPod()
		before := version(pod, tc.item)
		tc.change(pod)
		if changed := version(pod, tc.item) != before; changed != tc.want {
			t.Errorf("%s: version changed = %v, want %v", tc.name, changed, tc.want)
		}
	}
}

func TestSetUpFailsWithoutWriting(t *testing.T) {
	root := t.TempDir()
	_, err := (&downwardapi.Plugin{Mounter: &mount.Fake{}}).SetUp(context.Background(), spec(testPod(), field("spec.nodeName")), filepath.Join(root, "vol"))
	if err == nil || !strings.Contains(err.Error(), "spec.nodeName") {
		t.Fatalf("SetUp = %v, want an error naming the fieldPath", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) > 0 {
		t.Fatalf("failed SetUp created %v", entries)
	}
}
