package projected_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/plugins/projected"
)

// owner is the mode and owner of a file.
type owner struct {
	mode     os.FileMode
	uid, gid uint32
}

func ownerOf(t *testing.T, path string) owner {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := info.Sys().(*syscall.Stat_t)
	return owner{mode: info.Mode().Perm(), uid: st.Uid, gid: st.Gid}
}

func user(uid int64) *v1.SecurityContext { return &v1.SecurityContext{RunAsUser: &uid} }

// TestTokenModeAndOwner follows the kubelet: the token keeps the volume's
// defaultMode only when the pod sets neither fsGroup nor one runAsUser for
// every container (fsUser). Otherwise it is 0600, owned by fsUser when
// there is one, and fsGroup ownership adds group read. Only the token gets
// the uid; an unprivileged agent changes no owner but keeps 0600.
func TestTokenModeAndOwner(t *testing.T) {
	plugintest.NeedRoot(t, "changes file owners")
	for _, tc := range []struct {
		name         string
		pod          *v1.PodSecurityContext
		init         []*v1.SecurityContext
		containers   []*v1.SecurityContext
		ephemeral    []*v1.SecurityContext
		defaultMode  *int32
		unprivileged bool
		token, other owner // other: the namespace file beside the token
	}{
		{name: "neither", containers: []*v1.SecurityContext{nil},
			token: owner{0o644, 0, 0}, other: owner{0o644, 0, 0}},
		{name: "neither, defaultMode kept", containers: []*v1.SecurityContext{nil}, defaultMode: ptr[int32](0o444),
			token: owner{0o444, 0, 0}, other: owner{0o444, 0, 0}},
		{name: "pod runAsUser", pod: &v1.PodSecurityContext{RunAsUser: ptr[int64](1000)}, containers: []*v1.SecurityContext{nil, {}},
			token: owner{0o600, 1000, 0}, other: owner{0o644, 0, 0}},
		{name: "pod runAsUser, defaultMode not kept", pod: &v1.PodSecurityContext{RunAsUser: ptr[int64](1000)}, containers: []*v1.SecurityContext{nil},
			defaultMode: ptr[int32](0o444), token: owner{0o600, 1000, 0}, other: owner{0o444, 0, 0}},
		{name: "containers override the pod alike", pod: &v1.PodSecurityContext{RunAsUser: ptr[int64](1000)},
			init: []*v1.SecurityContext{user(2000)}, containers: []*v1.SecurityContext{user(2000), user(2000)},
			token: owner{0o600, 2000, 0}, other: owner{0o644, 0, 0}},
		{name: "containers' own users, none on the pod", containers: []*v1.SecurityContext{user(3000), user(3000)},
			token: owner{0o600, 3000, 0}, other: owner{0o644, 0, 0}},
		{name: "one container overrides the pod", pod: &v1.PodSecurityContext{RunAsUser: ptr[int64](1000)}, containers: []*v1.SecurityContext{nil, user(2000)},
			token: owner{0o644, 0, 0}, other: owner{0o644, 0, 0}},
		{name: "containers differ", containers: []*v1.SecurityContext{user(1000), user(2000)},
			token: owner{0o644, 0, 0}, other: owner{0o644, 0, 0}},
		{name: "an init container without a user", init: []*v1.SecurityContext{nil}, containers: []*v1.SecurityContext{user(1000)},
			token: owner{0o644, 0, 0}, other: owner{0o644, 0, 0}},
		{name: "an ephemeral container with another user", pod: &v1.PodSecurityContext{RunAsUser: ptr[int64](1000)},
			containers: []*v1.SecurityContext{nil}, ephemeral: []*v1.SecurityContext{user(0)},
			token: owner{0o644, 0, 0}, other: owner{0o644, 0, 0}},
		{name: "fsGroup only", pod: &v1.PodSecurityContext{FSGroup: ptr[int64](4000)}, containers: []*v1.SecurityContext{nil},
			token: owner{0o640, 0, 4000}, other: owner{0o644, 0, 4000}},
		{name: "fsGroup, containers differ", pod: &v1.PodSecurityContext{FSGroup: ptr[int64](4000)}, containers: []*v1.SecurityContext{user(1000), user(2000)},
			token: owner{0o640, 0, 4000}, other: owner{0o644, 0, 4000}},
		{name: "runAsUser and fsGroup", pod: &v1.PodSecurityContext{RunAsUser: ptr[int64](1000), FSGroup: ptr[int64](4000)}, containers: []*v1.SecurityContext{nil},
			defaultMode: ptr[int32](0o444), token: owner{0o640, 1000, 4000}, other: owner{0o444, 0, 4000}},
		{name: "unprivileged: no owner changes, still 0600", pod: &v1.PodSecurityContext{RunAsUser: ptr[int64](1000), FSGroup: ptr[int64](4000)},
			containers: []*v1.SecurityContext{nil}, unprivileged: true, token: owner{0o600, 0, 0}, other: owner{0o644, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec(tc.defaultMode, tokenSource("token"), namespaceSource("namespace"))
			s.Pod.Spec.SecurityContext = tc.pod
			for _, sc := range tc.init {
				s.Pod.Spec.InitContainers = append(s.Pod.Spec.InitContainers, v1.Container{Name: "init", SecurityContext: sc})
			}
			for _, sc := range tc.containers {
				s.Pod.Spec.Containers = append(s.Pod.Spec.Containers, v1.Container{Name: "c", SecurityContext: sc})
			}
			for _, sc := range tc.ephemeral {
				s.Pod.Spec.EphemeralContainers = append(s.Pod.Spec.EphemeralContainers,
					v1.EphemeralContainer{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug", SecurityContext: sc}})
			}
			var m mount.Mounter = &mount.Fake{}
			if tc.unprivileged {
				m = mount.Unprivileged{}
			}
			dir := plugintest.VolumeDir(t)
			p := &projected.Plugin{Mounter: m, Tokens: plugintest.Tokens{Ver: "1"}}
			if _, err := p.SetUp(context.Background(), s, dir); err != nil {
				t.Fatal(err)
			}
			if got := ownerOf(t, filepath.Join(dir, "token")); got != tc.token {
				t.Errorf("token: mode %#o uid %d gid %d, want mode %#o uid %d gid %d", got.mode, got.uid, got.gid, tc.token.mode, tc.token.uid, tc.token.gid)
			}
			if got := ownerOf(t, filepath.Join(dir, "namespace")); got != tc.other {
				t.Errorf("namespace file: mode %#o uid %d gid %d, want mode %#o uid %d gid %d", got.mode, got.uid, got.gid, tc.other.mode, tc.other.uid, tc.other.gid)
			}
		})
	}
}

// volumeTokens mints token-<n> and records the token each call found in
// the volume; it returns that token when reuse is set.
type volumeTokens struct {
	reuse bool
	seen  [][]byte
}

func (v *volumeTokens) Token(_ context.Context, _ *v1.Pod, _ *v1.ServiceAccountTokenProjection, current []byte) ([]byte, error) {
	v.seen = append(v.seen, current)
	if v.reuse && current != nil {
		return current, nil
	}
	return []byte("token-" + string(rune('0'+len(v.seen)))), nil
}

func (v *volumeTokens) Version(*v1.Pod, *v1.ServiceAccountTokenProjection) string { return "1" }

// TestSetUpHandsTheVolumesTokenToTokens: SetUp passes the token the volume
// holds at the source's path, and a reused token rewrites nothing.
func TestSetUpHandsTheVolumesTokenToTokens(t *testing.T) {
	tokens := &volumeTokens{reuse: true}
	p := &projected.Plugin{Mounter: &mount.Fake{}, Tokens: tokens}
	s := spec(nil, tokenSource("sa/token"), namespaceSource("namespace"))
	dir := plugintest.VolumeDir(t)
	for range 2 {
		if _, err := p.SetUp(context.Background(), s, dir); err != nil {
			t.Fatal(err)
		}
	}
	if len(tokens.seen) != 2 || tokens.seen[0] != nil || string(tokens.seen[1]) != "token-1" {
		t.Fatalf("Token saw %q in the volume, want nothing, then token-1", tokens.seen)
	}
	before, _ := os.Readlink(filepath.Join(dir, "..data"))
	if _, err := p.SetUp(context.Background(), s, dir); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(filepath.Join(dir, "..data")); after != before {
		t.Errorf("SetUp with the reused token rewrote the volume: ..data %s -> %s", before, after)
	}
}

// TestSetUpReadsOnlyTheVolumesOwnFile: what is at the token's path is
// read only if it is a regular file inside the volume, of at most 64 KiB.
func TestSetUpReadsOnlyTheVolumesOwnFile(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir string) // replaces the token link or file
		want  []byte
	}{
		{"the volume's file", func(t *testing.T, dir string) {}, []byte("token-1")},
		{"a link out of the volume", func(t *testing.T, dir string) {
			replace(t, filepath.Join(dir, "token"), func(p string) error { return os.Symlink(outside, p) })
		}, nil},
		{"a FIFO", func(t *testing.T, dir string) {
			replace(t, filepath.Join(dir, "..data", "token"), func(p string) error { return syscall.Mkfifo(p, 0o600) })
		}, nil},
		{"64 KiB", func(t *testing.T, dir string) {
			replace(t, filepath.Join(dir, "..data", "token"), func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte("a"), 64<<10), 0o600) })
		}, bytes.Repeat([]byte("a"), 64<<10)},
		{"more than 64 KiB", func(t *testing.T, dir string) {
			replace(t, filepath.Join(dir, "..data", "token"), func(p string) error { return os.WriteFile(p, bytes.Repeat([]byte("a"), 64<<10+1), 0o600) })
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens := &volumeTokens{}
			p := &projected.Plugin{Mounter: &mount.Fake{}, Tokens: tokens}
			s := spec(nil, tokenSource("token"))
			dir := plugintest.VolumeDir(t)
			if _, err := p.SetUp(context.Background(), s, dir); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, dir)
			if _, err := p.SetUp(context.Background(), s, dir); err != nil {
				t.Fatal(err)
			}
			if got := tokens.seen[1]; !bytes.Equal(got, tc.want) {
				t.Errorf("Token saw %.20q (%d bytes) in the volume, want %.20q", got, len(got), tc.want)
			}
		})
	}
}

// replace swaps the file or link p for what create makes.
func replace(t *testing.T, p string, create func(path string) error) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := create(p); err != nil {
		t.Fatal(err)
	}
}
