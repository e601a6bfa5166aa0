package projected_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/plugins/projected"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func ptr[T any](v T) *T { return &v }

func objects(cmVersion string) plugintest.Objects {
	return plugintest.Objects{
		ConfigMaps: map[string]*v1.ConfigMap{"ns/ca": {
			ObjectMeta: metav1.ObjectMeta{UID: "cm-uid", ResourceVersion: cmVersion},
			Data:       map[string]string{"ca.crt": "CERT " + cmVersion},
		}},
		Secrets: map[string]*v1.Secret{"ns/creds": {
			ObjectMeta: metav1.ObjectMeta{UID: "s-uid", ResourceVersion: "1"},
			Data:       map[string][]byte{"password": []byte("s3cr3t")},
		}},
	}
}

func cmSource(items ...v1.KeyToPath) v1.VolumeProjection {
	return v1.VolumeProjection{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "ca"}, Items: items}}
}

func secretSource(items ...v1.KeyToPath) v1.VolumeProjection {
	return v1.VolumeProjection{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}, Items: items}}
}

func namespaceSource(path string) v1.VolumeProjection {
	return v1.VolumeProjection{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
		{Path: path, FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
	}}}
}

func tokenSource(path string) v1.VolumeProjection {
	return v1.VolumeProjection{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: path, Audience: "api"}}
}

func spec(defaultMode *int32, sources ...v1.VolumeProjection) *volume.Spec {
	return &volume.Spec{
		Pod:     &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: v1.PodSpec{ServiceAccountName: "sa"}},
		Volume:  &v1.Volume{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: sources, DefaultMode: defaultMode}}},
		Objects: objects("1"),
	}
}

func TestSetUpMergesSources(t *testing.T) {
	s := spec(ptr[int32](0o440),
		cmSource(),
		secretSource(v1.KeyToPath{Key: "password", Path: "db/password", Mode: ptr[int32](0o400)}),
		namespaceSource("namespace"),
		tokenSource("token"),
	)
	dir := filepath.Join(t.TempDir(), "vol")
	f := &mount.Fake{}
	p := &projected.Plugin{Mounter: f, Tokens: plugintest.Tokens{Ver: "1"}}
	if _, err := p.SetUp(context.Background(), s, dir); err != nil {
		t.Fatal(err)
	}
	plugintest.CheckFiles(t, dir, map[string]plugintest.File{
		"ca.crt":      {Data: "CERT 1", Mode: 0o440},
		"db/password": {Data: "s3cr3t", Mode: 0o400},
		"namespace":   {Data: "ns", Mode: 0o440},
		"token":       {Data: "token-for-sa/api", Mode: 0o440},
	})
	if m, ok := f.Mounted(dir); !ok || m.Type != "tmpfs" {
		t.Errorf("mount on %s = %v, %v; want a tmpfs", dir, m, ok)
	}
}

func TestSetUpErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tokens  projected.Tokens
		sources []v1.VolumeProjection
		want    []string // substrings of the error
	}{
		{"two sources write one path", plugintest.Tokens{}, []v1.VolumeProjection{namespaceSource("ca.crt"), cmSource()},
			[]string{"sources[0]", "sources[1]", `"ca.crt"`}},
		{"secret key over configMap key", plugintest.Tokens{}, []v1.VolumeProjection{cmSource(), secretSource(v1.KeyToPath{Key: "password", Path: "ca.crt"})},
			[]string{"sources[0]", "sources[1]", `"ca.crt"`}},
		{"token without Tokens", nil, []v1.VolumeProjection{cmSource(), tokenSource("token")},
			[]string{"sources[1]", "serviceAccountToken", "API server"}},
		{"missing configMap", plugintest.Tokens{}, []v1.VolumeProjection{{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}},
			[]string{"sources[0]", "configMap ns/nope not found"}},
	} {
		root := t.TempDir()
		p := &projected.Plugin{Mounter: &mount.Fake{}, Tokens: tc.tokens}
		_, err := p.SetUp(context.Background(), spec(nil, tc.sources...), filepath.Join(root, "vol"))
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: SetUp = %v, want an error containing %s", tc.name, err, want)
			}
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error %q contains a secret value", tc.name, err)
		}
		if entries, _ := os.ReadDir(root); len(entries) > 0 {
			t.Errorf("%s: failed SetUp created %v", tc.name, entries)
		}
	}
}

func TestSetUpOnTmpfs(t *testing.T) {
	plugintest.NeedRoot(t, "mounts a tmpfs")
	ctx := context.Background()
	p := &projected.Plugin{Mounter: mount.System{}, Tokens: plugintest.Tokens{Ver: "1"}}
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, spec(ptr[int32](0o600), tokenSource("token")), dir); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(dir, "token"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		t.Errorf("token is on file system type %#x, want tmpfs", st.Type)
	}
	plugintest.CheckFiles(t, dir, map[string]plugintest.File{"token": {Data: "token-for-sa/api", Mode: 0o600}})
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if infos := plugintest.Mounts(t, dir); len(infos) > 0 {
		t.Errorf("TearDown left %d mounts", len(infos))
	}
}

func TestContentVersion(t *testing.T) {
	p := &projected.Plugin{Tokens: plugintest.Tokens{Ver: "1"}}
	s := spec(nil, cmSource(), namespaceSource("namespace"), tokenSource("token"))
	version := func() string {
		t.Helper()
		v, err := p.ContentVersion(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := version()
	for _, change := range []struct {
		name string
		do   func()
	}{
		{"configMap updated", func() { s.Objects = objects("2") }},
		{"token renewed", func() { p.Tokens = plugintest.Tokens{Ver: "2"} }},
		{"configMap deleted", func() { s.Objects = plugintest.Objects{} }},
		{"namespace changed", func() { s.Pod.Namespace = "other" }},
	} {
		change.do()
		if next := version(); next == v {
			t.Errorf("%s: ContentVersion stayed %q", change.name, v)
		} else {
			v = next
		}
	}
	if again := version(); again != v {
		t.Errorf("ContentVersion changed without a change: %q -> %q", v, again)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sources []v1.VolumeProjection
		wantErr string
	}{
		{"valid", []v1.VolumeProjection{cmSource(), secretSource(), namespaceSource("ns"), tokenSource("token")}, ""},
		{"empty source", []v1.VolumeProjection{{}}, "sources[0] must set exactly one"},
		{"two types in one source", []v1.VolumeProjection{{ConfigMap: cmSource().ConfigMap, Secret: secretSource().Secret}}, "sources[0] must set exactly one"},
		{"clusterTrustBundle", []v1.VolumeProjection{{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Path: "b"}}}, "only configMap, secret, downwardAPI and serviceAccountToken"},
		{"token path escapes", []v1.VolumeProjection{tokenSource("../token")}, "sources[0].serviceAccountToken.path"},
		{"item path escapes", []v1.VolumeProjection{cmSource(v1.KeyToPath{Key: "k", Path: "/abs"})}, "sources[0].configMap.items[0].path"},
		{"downwardAPI field", []v1.VolumeProjection{secretSource(), {DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
			{Path: "n", FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}},
		}}}}, "sources[1].downwardAPI.items[0].fieldRef"},
	} {
		err := (&projected.Plugin{Tokens: plugintest.Tokens{}}).Validate(spec(nil, tc.sources...))
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate = %v, want error containing %q", tc.name, err, tc.wantErr)
		}
	}
	if err := (&projected.Plugin{}).Validate(spec(ptr[int32](0o1777), cmSource())); err == nil {
		t.Error("Validate accepted defaultMode 01777")
	}
}

// TestValidateWithoutTokens: without Tokens (--mint-tokens=false, or no API
// server) a serviceAccountToken source is a permanent problem of its volume
// that says why and how a pod avoids it; other sources are still valid.
func TestValidateWithoutTokens(t *testing.T) {
	p := &projected.Plugin{}
	if err := p.Validate(spec(nil, cmSource(), namespaceSource("ns"))); err != nil {
		t.Errorf("Validate without a token source = %v, want nil", err)
	}
	err := p.Validate(spec(nil, cmSource(), tokenSource("token"), namespaceSource("ns")))
	if err == nil {
		t.Fatal("Validate accepted a serviceAccountToken source without Tokens")
	}
	for _, want := range []string{"projected.sources[1].serviceAccountToken", "does not mint service account tokens",
		"--mint-tokens=false", "automountServiceAccountToken: false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %q, want it to contain %q", err, want)
		}
	}
}
