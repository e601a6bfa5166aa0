package binder

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
)

// fakeLocal is a fake of the local provisioner with its snapshot API: its
// volumes have enforced capacity (local.AnnCapacity), and it takes and
// deletes snapshots, recording the calls.
type fakeLocal struct {
	*fakeProvisioner
	smu     sync.Mutex
	snaps   map[string]string // guarded by smu; handle -> PV name
	takes   []string          // guarded by smu; handles
	deletes []string          // guarded by smu; handles
	// holdTake, when set, holds TakeSnapshot until it is closed; taking
	// is closed when a call begins.
	holdTake chan struct{}
	taking   chan struct{}
	// takeErr, when set, fails every TakeSnapshot.
	takeErr error
}

var (
	_ provisioner.Provisioner = (*fakeLocal)(nil)
	_ Snapshotter             = (*fakeLocal)(nil)
)

func newFakeLocal() *fakeLocal {
	return &fakeLocal{fakeProvisioner: &fakeProvisioner{}, snaps: map[string]string{}, taking: make(chan struct{})}
}

func (p *fakeLocal) Name() string { return provisioner.LocalName }

func (p *fakeLocal) Provision(ctx context.Context, req provisioner.Request) (provisioner.Volume, error) {
	vol, err := p.fakeProvisioner.Provision(ctx, req)
	vol.Annotations = map[string]string{local.AnnCapacity: "btrfs"}
	return vol, err
}

func (p *fakeLocal) TakeSnapshot(ctx context.Context, pv *v1.PersistentVolume, name string) (SnapshotInfo, error) {
	p.smu.Lock()
	p.takes = append(p.takes, name)
	first := len(p.takes) == 1
	p.smu.Unlock()
	if first {
		close(p.taking)
	}
	if p.holdTake != nil {
		select {
		case <-p.holdTake:
		case <-ctx.Done():
			return SnapshotInfo{}, ctx.Err()
		}
	}
	if p.takeErr != nil {
		return SnapshotInfo{}, p.takeErr
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	p.snaps[name] = pv.Name
	return SnapshotInfo{Size: pv.Spec.Capacity[v1.ResourceStorage], Created: time.Unix(1700000000, 0)}, nil
}

func (p *fakeLocal) DeleteSnapshot(ctx context.Context, name string) error {
	p.smu.Lock()
	defer p.smu.Unlock()
	p.deletes = append(p.deletes, name)
	delete(p.snaps, name)
	return nil
}

// snapCalls returns the handles of the TakeSnapshot and DeleteSnapshot
// calls so far, and the snapshots that exist.
func (p *fakeLocal) snapCalls() (takes, deletes []string, exist map[string]string) {
	p.smu.Lock()
	defer p.smu.Unlock()
	exist = map[string]string{}
	for k, v := range p.snaps {
		exist[k] = v
	}
	return slices.Clone(p.takes), slices.Clone(p.deletes), exist
}

// withSnapshotter makes p the binder's Snapshotter of the local provisioner.
func withSnapshotter(p Snapshotter) func(*Source) {
	return func(b *Source) { b.ops.snapshotters = map[string]Snapshotter{provisioner.LocalName: p} }
}

// localClass is a class of the local provisioner.
func localClass(name string, params ...string) *storagev1.StorageClass {
	sc := newClass(name, classProvisioner(provisioner.LocalName))
	sc.Parameters = map[string]string{}
	for i := 0; i+1 < len(params); i += 2 {
		sc.Parameters[params[i]] = params[i+1]
	}
	return sc
}

// newSnapshot is a VolumeSnapshot in namespace "default" of claim.
func newSnapshot(name string, uid types.UID, claim string) *volumesnapshot.VolumeSnapshot {
	return &volumesnapshot.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid},
		Spec:       volumesnapshot.VolumeSnapshotSpec{Source: volumesnapshot.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}},
	}
}

// claimFrom sets the claim's spec.dataSourceRef.
func claimFrom(group, kind, name string) func(*v1.PersistentVolumeClaim) {
	return func(c *v1.PersistentVolumeClaim) {
		ref := &v1.TypedObjectReference{Kind: kind, Name: name}
		if group != "" {
			ref.APIGroup = &group
		}
		c.Spec.DataSourceRef = ref
	}
}

// localPV is the PersistentVolume fakeLocal makes for claim of class.
func localPV(claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) *v1.PersistentVolume {
	req := provisioner.Request{Claim: claim, Class: class, PVName: provisioner.PVName(claim), SelectedNode: "node-1"}
	vol, _ := newFakeLocal().Provision(context.Background(), req)
	return provisioner.NewPV(req, provisioner.LocalName, vol)
}

// snapshotNamed returns the /v1/claims entries of VolumeSnapshot name.
func (h *harness) snapshotNamed(name string) []SnapshotStatus {
	var out []SnapshotStatus
	for _, s := range h.b.Snapshots() {
		if s.Namespace == "default" && s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// readySnapshot reports whether VolumeSnapshot name shows one snapshot,
// ready to use, of the size given.
func (h *harness) readySnapshot(name, size string) func() bool {
	return func() bool {
		s := h.snapshotNamed(name)
		q := resource.MustParse(size)
		return len(s) == 1 && s[0].ReadyToUse && s[0].RestoreSize == q.String()
	}
}
