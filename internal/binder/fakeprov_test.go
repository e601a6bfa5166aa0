package binder

import (
	"context"
	"errors"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// testProvisioner is the provisioner name the tests' classes name.
const testProvisioner = "test.io/fake"

// fakeProvisioner records its calls and fails while told to. The volumes it
// makes are local directories for the requested node, as the local
// provisioner's are.
type fakeProvisioner struct {
	mu           sync.Mutex
	provisionErr error                 // guarded by mu
	deleteErr    error                 // guarded by mu
	requests     []provisioner.Request // guarded by mu
	deletes      []string              // guarded by mu; PV names
	asides       []string              // guarded by mu; PV names
	restores     []string              // guarded by mu; PV names
	restoreErr   error                 // guarded by mu
	// block, when set, holds Provision until it is closed.
	block chan struct{}
}

var _ provisioner.Provisioner = (*fakeProvisioner)(nil)

func (p *fakeProvisioner) Name() string { return testProvisioner }

func (p *fakeProvisioner) Provision(ctx context.Context, req provisioner.Request) (provisioner.Volume, error) {
	if p.block != nil {
		select {
		case <-p.block:
		case <-ctx.Done():
			return provisioner.Volume{}, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests = append(p.requests, req)
	if p.provisionErr != nil {
		return provisioner.Volume{}, p.provisionErr
	}
	return provisioner.Volume{
		Source: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/var/lib/volumes/" + req.PVName}},
		NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{req.SelectedNode}}},
		}}}},
	}, nil
}

func (p *fakeProvisioner) Delete(ctx context.Context, pv *v1.PersistentVolume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deletes = append(p.deletes, pv.Name)
	return p.deleteErr
}

func (p *fakeProvisioner) MoveAside(ctx context.Context, pv *v1.PersistentVolume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asides = append(p.asides, pv.Name)
	return nil
}

func (p *fakeProvisioner) Restore(ctx context.Context, pv *v1.PersistentVolume) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.restores = append(p.restores, pv.Name)
	return p.restoreErr
}

// moved returns the PV names of the MoveAside calls so far.
func (p *fakeProvisioner) moved() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.asides)
}

// fail sets the errors of the next calls (nil: they succeed).
func (p *fakeProvisioner) fail(provisionErr, deleteErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.provisionErr, p.deleteErr = provisionErr, deleteErr
}

// calls returns the PV names of the Provision and of the Delete calls so far.
func (p *fakeProvisioner) calls() (provisioned, deleted []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.requests {
		provisioned = append(provisioned, r.PVName)
	}
	return provisioned, slices.Clone(p.deletes)
}

var errDiskFull = errors.New("no space left on device")

// newClass returns a StorageClass of testProvisioner with reclaim policy
// Delete and volumeBindingMode WaitForFirstConsumer.
func newClass(name string, opts ...func(*storagev1.StorageClass)) *storagev1.StorageClass {
	reclaim := v1.PersistentVolumeReclaimDelete
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: testProvisioner,
		ReclaimPolicy: &reclaim, VolumeBindingMode: &mode}
	for _, o := range opts {
		o(sc)
	}
	return sc
}

func classRetain(sc *storagev1.StorageClass) {
	p := v1.PersistentVolumeReclaimRetain
	sc.ReclaimPolicy = &p
}

func classProvisioner(name string) func(*storagev1.StorageClass) {
	return func(sc *storagev1.StorageClass) { sc.Provisioner = name }
}

// provisionedPV is the PersistentVolume the fake provisioner makes for
// claim (whose UID must be set) of class.
func provisionedPV(claim *v1.PersistentVolumeClaim, class *storagev1.StorageClass) *v1.PersistentVolume {
	req := provisioner.Request{Claim: claim, Class: class, PVName: provisioner.PVName(claim), SelectedNode: "node-1"}
	vol, _ := (&fakeProvisioner{}).Provision(context.Background(), req)
	return provisioner.NewPV(req, testProvisioner, vol)
}

var errPartlyDeleted = errors.New("operation not permitted (an immutable file)")
