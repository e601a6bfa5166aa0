package local

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
)

// imageProvisioner is a provisioner over a real image backend in a new
// root, which it returns with the backend.
func imageProvisioner(t *testing.T) (*Provisioner, capacity.Backend, string) {
	t.Helper()
	needRoot(t)
	for _, tool := range []string{"losetup", "mkfs.ext4", "blkid"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (test/deps.sh installs it)", tool)
		}
	}
	root := t.TempDir()
	b, err := capacity.Open(t.Context(), capacity.Config{Root: root, Logger: zap.NewNop(), ForceImage: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Root: root, NodeName: node, Mounter: mount.System{}, Logger: zap.NewNop(), Capacity: b})
	if err != nil {
		t.Fatal(err)
	}
	return p, b, root
}

// fakeBackend makes each volume a plain directory and remembers sizes.
type fakeBackend struct {
	root string
	mu   sync.Mutex
	// sizes and deleted are guarded by mu.
	sizes   map[string]int64
	deleted []string
}

var _ capacity.Backend = (*fakeBackend)(nil)

func (f *fakeBackend) Kind() string { return "fake" }

func (f *fakeBackend) Create(_ context.Context, name string, size int64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sizes[name]; ok && s != size {
		return "", capacity.ErrExists
	}
	dir := filepath.Join(f.root, name)
	if err := os.MkdirAll(dir, 0o777); err != nil { //nolint:gosec // G301: a volume is 0777, as the real backends make it
		return "", err
	}
	f.sizes[name] = size
	return dir, nil
}

func (f *fakeBackend) Expand(_ context.Context, name string, size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sizes[name]
	switch {
	case !ok:
		return capacity.ErrNotFound
	case size < s:
		return capacity.ErrShrink
	}
	f.sizes[name] = size
	return nil
}

func (f *fakeBackend) Usage(context.Context, string) (capacity.Usage, error) {
	return capacity.Usage{}, errors.New("not faked")
}

func (f *fakeBackend) Delete(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, name)
	delete(f.sizes, name)
	return os.RemoveAll(filepath.Join(f.root, name))
}

func (f *fakeBackend) Recover(context.Context) ([]capacity.Volume, error) { return nil, nil }

// Promised: nothing is ever written to a fake volume.
func (f *fakeBackend) Promised(context.Context) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.sizes), nil
}

// newEnforcing makes a provisioner on root with a fake capacity backend.
func newEnforcing(t *testing.T, root string) (*Provisioner, *fakeBackend) {
	t.Helper()
	f := &fakeBackend{root: root, sizes: map[string]int64{}}
	p, err := New(Config{Root: root, NodeName: node, Mounter: mount.System{}, Logger: zap.NewNop(), Capacity: f})
	if err != nil {
		t.Fatal(err)
	}
	return p, f
}

// enforcing is request with the class parameter enforce "true".
func enforcing(name string) provisioner.Request {
	req := request(name, "")
	req.Class.Parameters = map[string]string{ParamEnforce: "true"}
	return req
}

func TestProvisionEnforced(t *testing.T) {
	root := t.TempDir()
	p, f := newEnforcing(t, root)
	req := enforcing("data")
	pv := provision(t, p, req)
	again := provision(t, p, req) // a retry finds the same volume
	if !reflect.DeepEqual(pv, again) {
		t.Errorf("second Provision = %+v, want %+v", again, pv)
	}
	name := "ns-data-" + req.PVName
	if pv.Spec.Local.Path != filepath.Join(root, name) {
		t.Errorf("path = %s", pv.Spec.Local.Path)
	}
	if want := map[string]int64{name: 5 << 30}; !reflect.DeepEqual(f.sizes, want) {
		t.Errorf("backend sizes = %v, want %v", f.sizes, want)
	}
	want := map[string]string{provisioner.AnnProvisionedBy: provisioner.LocalName, provisioner.AnnArchiveOnDelete: "false", AnnCapacity: "fake"}
	if !reflect.DeepEqual(pv.Annotations, want) {
		t.Errorf("annotations = %v, want %v", pv.Annotations, want)
	}
}

// A class that does not set enforce enforces; without a backend, its
// claims are refused with the reason, and nothing is made.
func TestEnforceIsTheDefault(t *testing.T) {
	req := request("data", "")
	delete(req.Class.Parameters, ParamEnforce)
	root := t.TempDir()
	p, f := newEnforcing(t, root)
	if pv := provision(t, p, req); pv.Annotations[AnnCapacity] != "fake" || len(f.sizes) != 1 {
		t.Errorf("annotations %v, backend sizes %v: want an enforced volume", pv.Annotations, f.sizes)
	}
	bare := t.TempDir()
	p, err := New(Config{Root: bare, NodeName: node, Mounter: mount.System{}, Logger: zap.NewNop(), NoCapacity: errors.New("quotas are off")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Provision(t.Context(), req); err == nil || !strings.Contains(err.Error(), "quotas are off") {
		t.Errorf("Provision without a backend = %v, want a refusal naming the reason", err)
	}
	if got := entries(t, bare); len(got) != 0 {
		t.Errorf("root holds %v after a refused request", got)
	}
}

func TestProvisionEnforcedRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend bool
		edit    func(r *provisioner.Request)
		want    string
	}{
		{"archiveOnDelete", true, func(r *provisioner.Request) { r.Class.Parameters[provisioner.ParamArchiveOnDelete] = "true" }, "cannot archive volumes"},
		{"no request", true, func(r *provisioner.Request) { r.Claim.Spec.Resources.Requests = nil }, "requests no storage"},
		{"a bad enforce", true, func(r *provisioner.Request) { r.Class.Parameters[ParamEnforce] = "yes" }, `parameter enforce "yes"`},
		{"no backend", false, func(*provisioner.Request) {}, "btrfs without quotas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			cfg := Config{Root: root, NodeName: node, Mounter: mount.System{}, Logger: zap.NewNop(), NoCapacity: errors.New("btrfs without quotas")}
			if tc.backend {
				cfg.Capacity = &fakeBackend{root: root, sizes: map[string]int64{}}
			}
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			req := enforcing("data")
			tc.edit(&req)
			_, err = p.Provision(t.Context(), req)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, provisioner.ErrReschedule) {
				t.Fatalf("Provision = %v, want an error saying %q, not ErrReschedule", err, tc.want)
			}
			if got := entries(t, root); len(got) != 0 {
				t.Errorf("root holds %v after a refused request", got)
			}
		})
	}
}

// The reclaim delay's aside step keeps an enforced volume in place, with
// its data; Delete hands it to the backend.
func TestEnforcedMoveAsideRestoreDelete(t *testing.T) {
	root := t.TempDir()
	p, f := newEnforcing(t, root)
	pv := provision(t, p, enforcing("data"))
	mustWrite(t, filepath.Join(pv.Spec.Local.Path, "file"))
	name := filepath.Base(pv.Spec.Local.Path)
	for range 2 {
		if err := p.MoveAside(t.Context(), pv); err != nil {
			t.Fatal(err)
		}
	}
	if got := entries(t, root); !reflect.DeepEqual(got, []string{name}) {
		t.Fatalf("root holds %v after MoveAside, want the volume in place", got)
	}
	if err := p.Restore(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pv.Spec.Local.Path, "file")); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
	for range 2 { // the second finds it gone
		if err := p.Delete(t.Context(), pv); err != nil {
			t.Fatal(err)
		}
	}
	if got := entries(t, root); len(got) != 0 {
		t.Errorf("root holds %v after Delete", got)
	}
	if !reflect.DeepEqual(f.deleted, []string{name, name}) {
		t.Errorf("backend deleted %v", f.deleted)
	}
	if err := p.Restore(t.Context(), pv); !errors.Is(err, provisioner.ErrGone) {
		t.Errorf("Restore of a deleted volume = %v, want ErrGone", err)
	}
	if err := p.MoveAside(t.Context(), pv); err != nil {
		t.Errorf("MoveAside of a deleted volume = %v", err)
	}
}

func TestEnforcedDeleteRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(pv *v1.PersistentVolume, p *Provisioner)
		want string
	}{
		{"no backend", func(_ *v1.PersistentVolume, p *Provisioner) { p.cfg.Capacity = nil }, "has none"},
		{"another backend", func(pv *v1.PersistentVolume, _ *Provisioner) { pv.Annotations[AnnCapacity] = "btrfs" }, "moved to another file system"},
		{"archive", func(pv *v1.PersistentVolume, _ *Provisioner) { pv.Annotations[provisioner.AnnArchiveOnDelete] = "true" }, "cannot archive volumes"},
		{"path outside", func(pv *v1.PersistentVolume, _ *Provisioner) { pv.Spec.Local.Path = "/etc/x-" + pv.Name }, "not directly under"},
		{"another node", func(pv *v1.PersistentVolume, _ *Provisioner) { pv.Spec.NodeAffinity = nodeAffinity("node-b") }, "does not pin it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			p, f := newEnforcing(t, root)
			pv := provision(t, p, enforcing("data"))
			tc.edit(pv, p)
			err := p.Delete(t.Context(), pv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Delete = %v, want an error saying %q", err, tc.want)
			}
			if len(f.deleted) != 0 || len(entries(t, root)) != 1 {
				t.Errorf("a refused Delete removed %v; root holds %v", f.deleted, entries(t, root))
			}
		})
	}
}

// A pod's bind mount of an enforced volume stops every step.
func TestEnforcedNothingMovesWhileMounted(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	p, f := newEnforcing(t, root)
	pv := provision(t, p, enforcing("data"))
	pod := filepath.Join(t.TempDir(), "pod-volume")
	if err := os.Mkdir(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(pv.Spec.Local.Path, pod, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(pod, unix.MNT_DETACH) })
	for name, call := range map[string]func(context.Context, *v1.PersistentVolume) error{
		"MoveAside": p.MoveAside, "Restore": p.Restore, "Delete": p.Delete,
	} {
		if err := call(t.Context(), pv); !errors.Is(err, provisioner.ErrInUse) || !strings.Contains(err.Error(), pod) {
			t.Errorf("%s of a volume a pod has mounted = %v, want ErrInUse naming %s", name, err, pod)
		}
	}
	if len(f.deleted) != 0 {
		t.Errorf("backend deleted %v", f.deleted)
	}
}

// With a real image backend: the volume's own mount is not a user, a
// pod's bind mount of it is, and Delete takes the image down only once
// that is gone.
func TestEnforcedImageInUse(t *testing.T) {
	p, b, root := imageProvisioner(t)
	req := enforcing("data")
	req.Claim.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("16Mi")
	pv := provision(t, p, req)
	t.Cleanup(func() { _ = b.Delete(context.Background(), filepath.Base(pv.Spec.Local.Path)) })
	if pv.Annotations[AnnCapacity] != "image" {
		t.Fatalf("annotations %v, want the image backend", pv.Annotations)
	}
	if err := p.MoveAside(t.Context(), pv); err != nil {
		t.Fatalf("MoveAside of an unused image volume: %v", err)
	}
	pod := filepath.Join(t.TempDir(), "pod-volume")
	if err := os.Mkdir(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(pv.Spec.Local.Path, pod, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(pod, unix.MNT_DETACH) })
	if err := p.Delete(t.Context(), pv); !errors.Is(err, provisioner.ErrInUse) || !strings.Contains(err.Error(), pod) {
		t.Fatalf("Delete of an image volume a pod has mounted = %v, want ErrInUse naming %s", err, pod)
	}
	if err := unix.Unmount(pod, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, root); !reflect.DeepEqual(got, []string{".capacity", ".snapshots"}) {
		t.Errorf("root holds %v after Delete, want only the records' directories (volumes, snapshots)", got)
	}
}
