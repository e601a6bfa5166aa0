package binder

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// within is how long a test waits for a pass.
const within = 2 * time.Second

// testSettle is how long the tests' binders wait before a claim removed
// counts.
const testSettle = 20 * time.Millisecond

// fakeInner is an inner source whose state the test sets.
type fakeInner struct {
	mu     sync.Mutex
	pods   []*v1.Pod                             // guarded by mu
	claims []*v1.PersistentVolumeClaim           // guarded by mu
	pvs    []*v1.PersistentVolume                // guarded by mu
	node   *v1.Node                              // guarded by mu
	scs    []*storagev1.StorageClass             // guarded by mu
	snaps  []*volumesnapshot.VolumeSnapshot      // guarded by mu
	vscs   []*volumesnapshot.VolumeSnapshotClass // guarded by mu
	synced bool                                  // guarded by mu
	notify func()                                // set before Run
	runErr error                                 // returned by Run at once when set
	// listing, when set, is the ListingSince of Status while the source
	// lists something; nil: long ago.
	listing *time.Time // guarded by mu
}

var _ Inner = (*fakeInner)(nil)

func newFakeInner() *fakeInner { return &fakeInner{synced: true} }

// update changes the state under the lock, then notifies, as a source does.
func (f *fakeInner) update(change func(f *fakeInner)) {
	f.mu.Lock()
	change(f)
	f.mu.Unlock()
	if f.notify != nil {
		f.notify()
	}
}

func (f *fakeInner) Name() string { return "manifests" }

func (f *fakeInner) Run(ctx context.Context) error {
	if f.runErr != nil {
		return f.runErr
	}
	<-ctx.Done()
	return nil
}

func (f *fakeInner) Pods() []*v1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pods)
}

func (f *fakeInner) Node() *v1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.node
}

func (f *fakeInner) Status() source.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.synced {
		return source.Status{Name: "manifests", Reason: "file x.yaml does not parse"}
	}
	st := source.Status{Name: "manifests", Synced: true}
	if len(f.pods)+len(f.claims)+len(f.pvs)+len(f.scs)+len(f.snaps) > 0 {
		st.ListingSince = time.Unix(0, 0)
		if f.listing != nil {
			st.ListingSince = *f.listing
		}
	}
	return st
}

func (f *fakeInner) PersistentVolumes() []*v1.PersistentVolume {
	f.mu.Lock()
	defer f.mu.Unlock()
	pvs := slices.Clone(f.pvs)
	slices.SortFunc(pvs, func(a, b *v1.PersistentVolume) int { return cmp.Compare(a.Name, b.Name) })
	return pvs
}

func (f *fakeInner) PersistentVolumeClaims() []*v1.PersistentVolumeClaim {
	f.mu.Lock()
	defer f.mu.Unlock()
	claims := slices.Clone(f.claims)
	slices.SortFunc(claims, func(a, b *v1.PersistentVolumeClaim) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return claims
}

func (f *fakeInner) StorageClasses() []*storagev1.StorageClass {
	f.mu.Lock()
	defer f.mu.Unlock()
	scs := slices.Clone(f.scs)
	slices.SortFunc(scs, func(a, b *storagev1.StorageClass) int { return cmp.Compare(a.Name, b.Name) })
	return scs
}

func (f *fakeInner) VolumeSnapshots() []*volumesnapshot.VolumeSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	snaps := slices.Clone(f.snaps)
	slices.SortFunc(snaps, func(a, b *volumesnapshot.VolumeSnapshot) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return snaps
}

func (f *fakeInner) VolumeSnapshotClasses() []*volumesnapshot.VolumeSnapshotClass {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.vscs)
}

func (f *fakeInner) Objects() volume.Objects { return fakeObjects{f} }

// missing is the error of a lookup that finds nothing, as the manifest
// source's: not known yet until synced.
func (f *fakeInner) missing(what string) error {
	if !f.Status().Synced {
		return fmt.Errorf("%s: %w", what, volume.ErrNotReady)
	}
	return fmt.Errorf("%s: %w", what, volume.ErrNotFound)
}

type fakeObjects struct{ f *fakeInner }

func (o fakeObjects) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	if name == "cm" {
		return &v1.ConfigMap{}, nil
	}
	return nil, o.f.missing("ConfigMap " + name)
}

func (o fakeObjects) Secret(namespace, name string) (*v1.Secret, error) {
	return nil, o.f.missing("Secret " + name)
}

func (o fakeObjects) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	for _, c := range o.f.PersistentVolumeClaims() {
		if c.Namespace == namespace && c.Name == name {
			return c, nil
		}
	}
	return nil, o.f.missing("PersistentVolumeClaim " + namespace + "/" + name)
}

func (o fakeObjects) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	for _, pv := range o.f.PersistentVolumes() {
		if pv.Name == name {
			return pv, nil
		}
	}
	return nil, o.f.missing("PersistentVolume " + name)
}

// harness runs a binder around a fake inner source and records its
// notifications and logs.
type harness struct {
	t       *testing.T
	inner   *fakeInner
	b       *Source
	path    string
	changes chan struct{}
	logs    *observer.ObservedLogs
	stop    func()
}

// start runs a binder on inner and path until the test ends (or stop is
// called). tweak may change the binder before it runs.
func start(t *testing.T, inner *fakeInner, path string, tweak ...func(*Source)) *harness {
	t.Helper()
	return startWith(t, inner, path, nil, tweak...)
}

// startWith is start with provisioners.
func startWith(t *testing.T, inner *fakeInner, path string, provs []provisioner.Provisioner, tweak ...func(*Source)) *harness {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	h := &harness{t: t, inner: inner, path: path, changes: make(chan struct{}, 1), logs: logs}
	b, err := New(Config{Inner: inner, StatePath: path, NodeName: "node-1", Logger: zap.New(core), OnChange: h.notify,
		Provisioners: provs, Settle: testSettle})
	if err != nil {
		t.Fatal(err)
	}
	nonces := 0
	b.newNonce = func() string { nonces++; return fmt.Sprintf("n%d", nonces) } // on the binding loop only
	for _, f := range tweak {
		f(b)
	}
	h.b = b
	inner.notify = b.Notify
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) notify() {
	select {
	case h.changes <- struct{}{}:
	default:
	}
}

// update changes the inner source and waits for the pass that follows,
// up to the OnChange after which cond holds.
func (h *harness) update(change func(f *fakeInner), what string, cond func() bool) {
	h.t.Helper()
	h.inner.update(change)
	h.expect(what, cond)
}

// expect waits, up to `within`, for an OnChange call after which cond holds.
func (h *harness) expect(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case <-h.changes:
			if cond() {
				return
			}
		case <-deadline:
			h.t.Fatalf("%s: not observed through OnChange within %v; status %+v, claims %+v",
				what, within, h.b.Status(), h.b.Claims())
		}
	}
}

// claim returns the claim's view, failing the test on an error.
func (h *harness) claim(name string) *v1.PersistentVolumeClaim {
	h.t.Helper()
	c, err := h.b.Objects().PersistentVolumeClaim("default", name)
	if err != nil {
		h.t.Fatalf("claim %s: %v", name, err)
	}
	return c
}

// pv returns the PersistentVolume's view, failing the test on an error.
func (h *harness) pv(name string) *v1.PersistentVolume {
	h.t.Helper()
	pv, err := h.b.Objects().PersistentVolume(name)
	if err != nil {
		h.t.Fatalf("PersistentVolume %s: %v", name, err)
	}
	return pv
}

// boundTo reports whether the claim's view is Bound to pv.
func (h *harness) boundTo(claim, pv string) func() bool {
	return func() bool {
		c, err := h.b.Objects().PersistentVolumeClaim("default", claim)
		return err == nil && c.Status.Phase == v1.ClaimBound && c.Spec.VolumeName == pv
	}
}

// claimStatus returns the /v1/claims entries of a claim.
func (h *harness) claimStatus(name string) []ClaimStatus {
	var out []ClaimStatus
	for _, cs := range h.b.Claims() {
		if cs.Namespace == "default" && cs.Name == name {
			out = append(out, cs)
		}
	}
	return out
}

// synced reports whether the binder says it is synced.
func (h *harness) synced() bool { return h.b.Status().Synced }

// eventually waits, up to `within`, for cond, checking every 5 ms: for
// what changes no state of the binder (a call retried with the same error).
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not observed within %v; claims %+v", what, within, h.b.Claims())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// load reads the records of the state file, for tests.
func (st store) load() (records, error) {
	rs, _, err := st.loadState()
	return rs, err
}

// save writes rs, and no made claims, to the state file, for tests.
func (st store) save(rs records) error { return st.saveState(rs, nil, nil) }
