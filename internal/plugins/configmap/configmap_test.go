package configmap_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/configmap"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// file is a plugintest.File, local so that literals may omit field names.
type file struct {
	data string
	mode os.FileMode
}

func checkFiles(t *testing.T, dir string, want map[string]file) {
	t.Helper()
	files := map[string]plugintest.File{}
	for p, f := range want {
		files[p] = plugintest.File{Data: f.data, Mode: f.mode}
	}
	plugintest.CheckFiles(t, dir, files)
}

// binary is not valid UTF-8 and holds NULs.
var binary = string([]byte{0, 0xff, 0xfe, 'x', 0, '\n', 0xc3})

func configMap(rv string, data map[string]string, binaryData map[string][]byte) *v1.ConfigMap {
	return &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns", UID: "uid-1", ResourceVersion: rv},
		Data:       data, BinaryData: binaryData,
	}
}

func spec(src v1.ConfigMapVolumeSource, cm *v1.ConfigMap) *volume.Spec {
	src.Name = "cfg"
	objects := plugintest.Objects{ConfigMaps: map[string]*v1.ConfigMap{}}
	if cm != nil {
		objects.ConfigMaps["ns/cfg"] = cm
	}
	return &volume.Spec{
		Pod:     &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}},
		Volume:  &v1.Volume{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &src}},
		Objects: objects,
	}
}

func ptr[T any](v T) *T { return &v }

func TestSetUp(t *testing.T) {
	gid := int64(os.Getgid())
	if os.Geteuid() == 0 {
		gid = 4321
	}
	values := map[string]string{"a.conf": "alpha value", "b": "beta value"}
	cm := configMap("1", values, map[string][]byte{"bin": []byte(binary)})
	for _, tc := range []struct {
		name    string
		src     v1.ConfigMapVolumeSource
		cm      *v1.ConfigMap
		fsGroup *int64
		want    map[string]file
		wantErr string
	}{
		{name: "all keys of data and binaryData", cm: cm,
			want: map[string]file{"a.conf": {"alpha value", 0o644}, "b": {"beta value", 0o644}, "bin": {binary, 0o644}}},
		{name: "items at nested paths", cm: cm,
			src:  v1.ConfigMapVolumeSource{Items: []v1.KeyToPath{{Key: "a.conf", Path: "etc/app/a.conf"}, {Key: "bin", Path: "etc/bin"}}},
			want: map[string]file{"etc/app/a.conf": {"alpha value", 0o644}, "etc/bin": {binary, 0o644}}},
		{name: "defaultMode", cm: cm, src: v1.ConfigMapVolumeSource{DefaultMode: ptr[int32](0o640)},
			want: map[string]file{"a.conf": {"alpha value", 0o640}, "b": {"beta value", 0o640}, "bin": {binary, 0o640}}},
		{name: "item mode over defaultMode", cm: cm,
			src: v1.ConfigMapVolumeSource{DefaultMode: ptr[int32](0o600), Items: []v1.KeyToPath{
				{Key: "a.conf", Path: "a"}, {Key: "b", Path: "b", Mode: ptr[int32](0o405)},
			}},
			want: map[string]file{"a": {"alpha value", 0o600}, "b": {"beta value", 0o405}}},
		{name: "optional, object missing", src: v1.ConfigMapVolumeSource{Optional: ptr(true)}, want: map[string]file{}},
		{name: "optional, key missing", cm: cm,
			src:  v1.ConfigMapVolumeSource{Optional: ptr(true), Items: []v1.KeyToPath{{Key: "b", Path: "b"}, {Key: "nope", Path: "nope"}}},
			want: map[string]file{"b": {"beta value", 0o644}}},
		{name: "fsGroup", cm: cm, fsGroup: &gid, src: v1.ConfigMapVolumeSource{DefaultMode: ptr[int32](0o400)},
			want: map[string]file{"a.conf": {"alpha value", 0o440}, "b": {"beta value", 0o440}, "bin": {binary, 0o440}}},
		{name: "object missing", wantErr: "configMap ns/cfg not found"},
		{name: "key missing", cm: cm, src: v1.ConfigMapVolumeSource{Items: []v1.KeyToPath{{Key: "nope", Path: "x"}}}, wantErr: `no key "nope"`},
		{name: "key in data and binaryData", cm: configMap("1", values, map[string][]byte{"b": []byte(binary)}), wantErr: `key "b" is in both`},
		{name: "key escaping the volume", cm: configMap("1", map[string]string{"../x": "escaped value", "ok": "ok value"}, nil), wantErr: `"../x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec(tc.src, tc.cm)
			s.Pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: tc.fsGroup}
			root := t.TempDir()
			dir := filepath.Join(root, "vol")
			_, err := (&configmap.Plugin{Mounter: &mount.Fake{}}).SetUp(context.Background(), s, dir)
			if tc.wantErr != "" {
				checkFailed(t, err, tc.wantErr, root, "alpha value", "beta value", binary, "escaped value", "ok value")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkFiles(t, dir, tc.want)
			if tc.fsGroup != nil {
				checkGroup(t, dir, tc.want, uint32(*tc.fsGroup))
			}
		})
	}
}

// checkFailed checks that err contains want and none of the values, and
// that nothing was written below root.
func checkFailed(t *testing.T, err error, want, root string, values ...string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("SetUp = %v, want an error containing %s", err, want)
	}
	for _, v := range values {
		if strings.Contains(err.Error(), v) {
			t.Errorf("error %q contains the value %q", err, v)
		}
	}
	if tree := plugintest.Tree(t, root); len(tree) != 1 {
		t.Errorf("failed SetUp wrote %q", tree)
	}
}

func checkGroup(t *testing.T, dir string, want map[string]file, gid uint32) {
	t.Helper()
	for p := range want {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Sys().(*syscall.Stat_t).Gid; got != gid {
			t.Errorf("group of %s = %d, want %d", p, got, gid)
		}
	}
}

func TestRefresh(t *testing.T) {
	ctx := context.Background()
	p := &configmap.Plugin{Mounter: &mount.Fake{}}
	dir := filepath.Join(t.TempDir(), "vol")
	s := spec(v1.ConfigMapVolumeSource{}, configMap("1", map[string]string{"a": "1", "b": "2"}, nil))
	ver1, err := p.ContentVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	data1, _ := os.Readlink(filepath.Join(dir, "..data"))

	s = spec(v1.ConfigMapVolumeSource{}, configMap("2", map[string]string{"a": "one"}, nil))
	ver2, _ := p.ContentVersion(s)
	if ver2 == ver1 {
		t.Fatalf("ContentVersion did not change with the resourceVersion: %q", ver2)
	}
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, map[string]file{"a": {"one", 0o644}})
	if data2, _ := os.Readlink(filepath.Join(dir, "..data")); data2 == data1 {
		t.Errorf("..data still points at %s after a content change", data1)
	}

	s = spec(v1.ConfigMapVolumeSource{}, nil)
	if v, err := p.ContentVersion(s); err != nil || v != "absent" {
		t.Errorf("ContentVersion of a missing configMap = %q, %v; want \"absent\"", v, err)
	}
	recreated := configMap("2", map[string]string{"a": "one"}, nil)
	recreated.UID = "uid-2"
	if v, _ := p.ContentVersion(spec(v1.ConfigMapVolumeSource{}, recreated)); v == ver2 {
		t.Errorf("ContentVersion %q did not change when the configMap was recreated", v)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		src     v1.ConfigMapVolumeSource
		wantErr string
	}{
		{"valid", v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
			DefaultMode: ptr[int32](0o600), Items: []v1.KeyToPath{{Key: "k", Path: "a/b", Mode: ptr[int32](0o400)}}}, ""},
		{"no name", v1.ConfigMapVolumeSource{}, "configMap.name is required"},
		{"item escapes", named(v1.ConfigMapVolumeSource{Items: []v1.KeyToPath{{Key: "k", Path: "../x"}}}), "configMap.items[0].path"},
		{"absolute item path", named(v1.ConfigMapVolumeSource{Items: []v1.KeyToPath{{Key: "k", Path: "/etc/x"}}}), "configMap.items[0].path"},
		{"item without key", named(v1.ConfigMapVolumeSource{Items: []v1.KeyToPath{{Path: "x"}}}), "configMap.items[0].key is required"},
		{"item mode", named(v1.ConfigMapVolumeSource{Items: []v1.KeyToPath{{Key: "k", Path: "x", Mode: ptr[int32](0o1777)}}}), "configMap.items[0].mode"},
		{"defaultMode", named(v1.ConfigMapVolumeSource{DefaultMode: ptr[int32](-1)}), "configMap.defaultMode"},
	} {
		s := &volume.Spec{Pod: &v1.Pod{}, Volume: &v1.Volume{VolumeSource: v1.VolumeSource{ConfigMap: &tc.src}}}
		err := (&configmap.Plugin{}).Validate(s)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate = %v, want error containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func named(src v1.ConfigMapVolumeSource) v1.ConfigMapVolumeSource {
	src.Name = "cfg"
	return src
}
