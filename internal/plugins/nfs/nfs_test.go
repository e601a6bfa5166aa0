package nfs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/nfs"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func inline(server, path string) *volume.Spec {
	return &volume.Spec{
		Pod:    &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}},
		Volume: &v1.Volume{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: server, Path: path}}},
	}
}

func pvSpec(server, path string, options ...string) *volume.Spec {
	s := inline("", "")
	s.Volume = &v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}
	s.PV = &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: v1.PersistentVolumeSpec{MountOptions: options,
			PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: server, Path: path}}},
	}
	return s
}

func TestValidateRefusesWhatMountCouldMisread(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    *volume.Spec
		wantErr string
	}{
		{"plain", inline("nfs.example", "/exports/a"), ""},
		{"IPv6", inline("fd00::1", "/exports/a"), ""},
		{"IPv6 in brackets", inline("[fd00::1]", "/exports/a"), ""},
		{"no server", inline("", "/exports/a"), "nfs.server is required"},
		{"server that is an option", inline("-oremount", "/exports/a"), "may not start with '-'"},
		{"server with a comma", inline("a,b", "/x"), "whitespace or a comma"},
		{"server with a space", inline("a b", "/x"), "whitespace or a comma"},
		{"server with a NUL byte", inline("a\x00b", "/x"), "whitespace or a comma"},
		// mount.nfs would mount [srv]:/other:/x, server srv, path /other:/x.
		{"server that moves the path", inline("[srv]:/other", "/x"), "only around the whole address"},
		{"server with ']'", inline("fd00::1]", "/x"), "only around the whole address"},
		{"server with '[' alone", inline("[fd00::1", "/x"), "only around the whole address"},
		{"path with a NUL byte", inline("s", "/a\x00b"), "whitespace or a comma"},
		{"option with a NUL byte", pvSpec("s", "/x", "ro\x00"), "mount option"},
		{"relative path", inline("s", "exports"), "absolute export path"},
		{"path with a comma", inline("s", "/a,rw"), "whitespace or a comma"},
		{"PV path", pvSpec("s", "rel"), "PersistentVolume pv-1: spec.nfs.path"},
		{"option injection", pvSpec("s", "/x", "vers=3,rw"), "mount option"},
		{"option that is a flag", pvSpec("s", "/x", "--bind"), "mount option"},
		{"good options", pvSpec("s", "/x", "nfsvers=4.1", "hard"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := (&nfs.Plugin{}).Validate(tc.spec)
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate = %v, want error %q", err, tc.wantErr)
			}
		})
	}
}

// recorder records the mounts asked of mount(8), and can hold them.
type recorder struct {
	mu    sync.Mutex
	calls []string // guarded by mu
	hold  chan struct{}
	err   error
}

func (r *recorder) Mount(source, target, fsType string, options []string) error {
	r.mu.Lock()
	r.calls = append(r.calls, strings.Join([]string{fsType, source, strings.Join(options, ",")}, " "))
	r.mu.Unlock()
	if r.hold != nil {
		<-r.hold
	}
	return r.err
}

func (r *recorder) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func TestMountArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *volume.Spec
		want string
	}{
		{"inline", inline("nfs.example", "/exports/a"), "nfs nfs.example:/exports/a "},
		{"IPv6 server in brackets", inline("fd00::1", "/e"), "nfs [fd00::1]:/e "},
		{"inline read-only", func() *volume.Spec { s := inline("s", "/e"); s.Volume.NFS.ReadOnly = true; return s }(), "nfs s:/e ro"},
		{"PV options", pvSpec("s", "/e", "nfsvers=4.1", "hard"), "nfs s:/e nfsvers=4.1,hard"},
		{"legacy annotation wins", func() *volume.Spec {
			s := pvSpec("s", "/e", "nfsvers=4.1")
			s.PV.Annotations = map[string]string{"volume.beta.kubernetes.io/mount-options": "vers=3, soft"}
			return s
		}(), "nfs s:/e vers=3,soft"},
		{"claim read-only", func() *volume.Spec { s := pvSpec("s", "/e"); s.Volume.PersistentVolumeClaim.ReadOnly = true; return s }(), "nfs s:/e ro"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{err: errors.New("mount: no NFS client here")}
			dir := plugintest.VolumeDir(t)
			_, err := (&nfs.Plugin{Tool: r}).SetUp(context.Background(), tc.spec, dir)
			if err == nil || !slices.Equal(r.Calls(), []string{tc.want}) {
				t.Fatalf("SetUp = %v, mounts %q; want %q and the tool's error", err, r.Calls(), tc.want)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed mount left %s", dir)
			}
		})
	}
}

// giveUpOnAMount runs a SetUp of dir whose mount(8) hangs until its deadline
// passes. The mount table is read before mount(8) is asked, and under load
// that can take the whole deadline: nothing is in flight then, and SetUp is
// tried again with twice the deadline.
func giveUpOnAMount(t *testing.T, p *nfs.Plugin, dir string) {
	t.Helper()
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := p.SetUp(ctx, inline("s", "/e"), dir)
		cancel()
		switch {
		case !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("SetUp with a mount that hangs = %v, want DeadlineExceeded", err)
		case strings.Contains(err.Error(), "gave up waiting for mount(8)"):
			return
		case wait >= 2*time.Second:
			t.Fatalf("SetUp never reached mount(8) within %v: %v", wait, err)
		}
	}
}

// waitForCalls waits until r has been asked n mounts: a mount given up on
// runs on, and may not have reached the tool yet.
func waitForCalls(t *testing.T, r *recorder, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(r.Calls()) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d mounts asked, want %d", len(r.Calls()), n)
		}
	}
}

// A mount(8) given up on at its deadline may still finish: the next call on
// the same directory waits for it instead of mounting a second time.
func TestMountGivenUpOnIsWaitedFor(t *testing.T) {
	r := &recorder{hold: make(chan struct{}), err: errors.New("refused")}
	p := &nfs.Plugin{Tool: r}
	dir := plugintest.VolumeDir(t)
	giveUpOnAMount(t, p, dir)
	waitForCalls(t, r, 1)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the mount point of an uncertain mount was removed: %v", err)
	}
	for _, call := range []func(ctx context.Context) error{
		func(ctx context.Context) error { _, err := p.SetUp(ctx, inline("s", "/e"), dir); return err },
		func(ctx context.Context) error { return p.TearDown(ctx, dir) },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := call(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "has not returned") {
			t.Fatalf("call while a mount is in flight = %v; want it to wait", err)
		}
	}
	if n := len(r.Calls()); n != 1 {
		t.Fatalf("%d mounts asked, want 1", n)
	}
	close(r.hold)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := p.TearDown(context.Background(), dir)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TearDown after the mount returned: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Lstat(filepath.Clean(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("TearDown left %s", dir)
	}
}
