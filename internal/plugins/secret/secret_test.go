package secret_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/plugins/secret"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Secret values; no error may contain any of them.
var (
	password = "s3cr3t-password"
	binary   = string([]byte{0, 0xff, 's', '3', 0, 0xc3})
	values   = []string{password, binary, "s3cr3t-escape"}
)

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

func newSecret(rv string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ns", UID: "uid-1", ResourceVersion: rv}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func spec(src v1.SecretVolumeSource, s *v1.Secret) *volume.Spec {
	src.SecretName = "creds"
	objects := plugintest.Objects{Secrets: map[string]*v1.Secret{}}
	if s != nil {
		objects.Secrets["ns/creds"] = s
	}
	return &volume.Spec{
		Pod:     &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}},
		Volume:  &v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &src}},
		Objects: objects,
	}
}

func ptr[T any](v T) *T { return &v }

func TestSetUp(t *testing.T) {
	s := newSecret("1", map[string]string{"password": password, "bin": binary})
	for _, tc := range []struct {
		name    string
		src     v1.SecretVolumeSource
		secret  *v1.Secret
		want    map[string]file
		wantErr string
	}{
		{name: "all keys", secret: s, want: map[string]file{"password": {password, 0o644}, "bin": {binary, 0o644}}},
		{name: "items with nested paths and modes", secret: s,
			src: v1.SecretVolumeSource{DefaultMode: ptr[int32](0o400), Items: []v1.KeyToPath{
				{Key: "password", Path: "db/password"}, {Key: "bin", Path: "db/keys/bin", Mode: ptr[int32](0o440)},
			}},
			want: map[string]file{"db/password": {password, 0o400}, "db/keys/bin": {binary, 0o440}}},
		{name: "optional, secret missing", src: v1.SecretVolumeSource{Optional: ptr(true)}, want: map[string]file{}},
		{name: "optional, key missing", secret: s,
			src:  v1.SecretVolumeSource{Optional: ptr(true), Items: []v1.KeyToPath{{Key: "nope", Path: "nope"}, {Key: "password", Path: "p"}}},
			want: map[string]file{"p": {password, 0o644}}},
		{name: "secret missing", wantErr: "secret ns/creds not found"},
		{name: "key missing", secret: s, src: v1.SecretVolumeSource{Items: []v1.KeyToPath{{Key: "nope", Path: "x"}}}, wantErr: `no key "nope"`},
		{name: "key escaping the volume", secret: newSecret("1", map[string]string{"../escape": "s3cr3t-escape"}), wantErr: `"../escape"`},
		{name: "item path escaping the volume", secret: s, src: v1.SecretVolumeSource{Items: []v1.KeyToPath{{Key: "password", Path: "../p"}}}, wantErr: `"../p"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "vol")
			f := &mount.Fake{}
			_, err := (&secret.Plugin{Mounter: f}).SetUp(context.Background(), spec(tc.src, tc.secret), dir)
			if tc.wantErr != "" {
				checkSecretError(t, err, tc.wantErr)
				if tree := plugintest.Tree(t, root); len(tree) != 1 {
					t.Errorf("failed SetUp left %q", tree)
				}
				if mounts, _ := f.MountsUnder(context.Background(), root); len(mounts) > 0 {
					t.Errorf("failed SetUp left mounts %q", mounts)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m, ok := f.Mounted(dir); !ok || m.Type != "tmpfs" {
				t.Errorf("mount on %s = %v, %v; want a tmpfs", dir, m, ok)
			}
			checkFiles(t, dir, tc.want)
		})
	}
}

func checkSecretError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("SetUp = %v, want an error containing %s", err, want)
	}
	for _, v := range values {
		if strings.Contains(err.Error(), v) {
			t.Errorf("error %q contains a secret value", err)
		}
	}
}

// TestCollisionErrorHasNoValue plants a file where a key's link must go: the
// write fails, and neither the error nor the planted file holds the value.
func TestCollisionErrorHasNoValue(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	plugintest.WriteFile(t, filepath.Join(dir, "password"), "planted")
	_, err := (&secret.Plugin{Mounter: &mount.Fake{}}).SetUp(context.Background(), spec(v1.SecretVolumeSource{}, newSecret("1", map[string]string{"password": password})), dir)
	checkSecretError(t, err, "password")
	if got := plugintest.ReadFile(t, filepath.Join(dir, "password")); got != "planted" {
		t.Errorf("planted file = %q, want it untouched", got)
	}
}

func TestSetUpOnTmpfs(t *testing.T) {
	plugintest.NeedRoot(t, "mounts a tmpfs")
	ctx := context.Background()
	p := &secret.Plugin{Mounter: mount.System{}}
	dir := plugintest.VolumeDir(t)
	if _, err := p.SetUp(ctx, spec(v1.SecretVolumeSource{}, newSecret("1", map[string]string{"password": password})), dir); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(dir, "password"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		t.Errorf("password is on file system type %#x, want tmpfs", st.Type)
	}
	if err := p.TearDown(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if infos := plugintest.Mounts(t, dir); len(infos) > 0 {
		t.Errorf("TearDown left %d mounts", len(infos))
	}
}

// TestSetUpOnTmpfsWithNoSwap: on a kernel that supports it, the secret's
// tmpfs is mounted with noswap (the kernel's mount table says so) and the
// set-up reports it.
func TestSetUpOnTmpfsWithNoSwap(t *testing.T) {
	plugintest.NeedNoSwap(t)
	ctx := context.Background()
	p := &secret.Plugin{Mounter: mount.System{}, NoSwap: true}
	dir := plugintest.VolumeDir(t)
	t.Cleanup(func() { plugintest.UnmountAll(t, dir) })
	s := spec(v1.SecretVolumeSource{}, newSecret("1", map[string]string{"password": password}))
	res, err := p.SetUp(ctx, s, dir)
	if err != nil {
		t.Fatal(err)
	}
	infos := plugintest.Mounts(t, dir)
	if len(infos) != 1 || infos[0].FSType != "tmpfs" || !slices.Contains(strings.Split(infos[0].VFSOptions, ","), "noswap") {
		t.Fatalf("mounts at %s = %v, want one tmpfs with noswap in its super options", dir, infos)
	}
	if res.Swap != volume.SwapNever {
		t.Errorf("SetUp reports swap %v, want SwapNever", res.Swap)
	}
	if res, err = p.SetUp(ctx, s, dir); err != nil || res.Swap != volume.SwapUnknown {
		t.Errorf("SetUp again = %v, %v; want SwapUnknown (nothing mounted again)", res.Swap, err)
	}
	if n := len(plugintest.Mounts(t, dir)); n != 1 {
		t.Errorf("%d mounts after a second SetUp, want 1", n)
	}
}

func TestRefresh(t *testing.T) {
	ctx := context.Background()
	p := &secret.Plugin{Mounter: &mount.Fake{}}
	dir := filepath.Join(t.TempDir(), "vol")
	s := spec(v1.SecretVolumeSource{}, newSecret("1", map[string]string{"password": password, "old": "x"}))
	ver1, err := p.ContentVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	s = spec(v1.SecretVolumeSource{}, newSecret("2", map[string]string{"password": "rotated"}))
	if ver2, _ := p.ContentVersion(s); ver2 == ver1 {
		t.Errorf("ContentVersion %q did not change with the resourceVersion", ver2)
	}
	if _, err := p.SetUp(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, map[string]file{"password": {"rotated", 0o644}})
	if v, err := p.ContentVersion(spec(v1.SecretVolumeSource{}, nil)); err != nil || v != "absent" {
		t.Errorf("ContentVersion of a missing secret = %q, %v; want \"absent\"", v, err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		src     v1.SecretVolumeSource
		wantErr string
	}{
		{"valid", v1.SecretVolumeSource{SecretName: "creds", Items: []v1.KeyToPath{{Key: "k", Path: "a/b"}}}, ""},
		{"no name", v1.SecretVolumeSource{}, "secret.secretName is required"},
		{"item escapes", v1.SecretVolumeSource{SecretName: "creds", Items: []v1.KeyToPath{{Key: "k", Path: "a/../../x"}}}, "secret.items[0].path"},
		{"defaultMode", v1.SecretVolumeSource{SecretName: "creds", DefaultMode: ptr[int32](0o4755)}, "secret.defaultMode"},
	} {
		s := &volume.Spec{Pod: &v1.Pod{}, Volume: &v1.Volume{VolumeSource: v1.VolumeSource{Secret: &tc.src}}}
		err := (&secret.Plugin{}).Validate(s)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Validate = %v, want error containing %q", tc.name, err, tc.wantErr)
		}
	}
}
