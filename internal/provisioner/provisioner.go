package provisioner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// The annotations of the external provisioning protocol, as the PV
// controller and the scheduler write and read them.
const (
	// AnnStorageProvisioner on a claim names the provisioner the PV
	// controller expects to provision it.
	AnnStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	// AnnBetaStorageProvisioner is the older name of AnnStorageProvisioner,
	// still written by the PV controller.
	AnnBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	// AnnSelectedNode on a claim of a WaitForFirstConsumer class names the
	// node the scheduler chose for its first pod.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnProvisionedBy on a PV names the provisioner that made it; only
	// that provisioner deletes its storage.
	AnnProvisionedBy = "pv.kubernetes.io/provisioned-by"
	// AnnArchiveOnDelete on a provisioned PV records the class's
	// archiveOnDelete at provisioning time ("true" or "false"), so that a
	// class edited or deleted later cannot change what happens to the data.
	AnnArchiveOnDelete = "volume-agent.io/archive-on-delete"
)

// The provisioner names, as a StorageClass's provisioner field gives them.
// LocalName is also the name of the CSIDriver object through which the
// scheduler finds the local provisioner's CSIStorageCapacity objects, so it
// is a DNS subdomain (no "/").
const (
	LocalName     = "local.volume-agent.io"
	NFSSubdirName = "volume-agent.io/nfs-subdir"
	// LegacyLocalName is the local provisioner's first name, still served:
	// classes naming it provision as LocalName's do, but the scheduler
	// does not consider capacity for them (no CSIDriver can have the name).
	LegacyLocalName = "volume-agent.io/local"
)

// Canonical is the name of the provisioner that serves name: LocalName
// for LegacyLocalName, name itself otherwise. Compare a name read from a
// class, a claim or a PV with a provisioner's Name through it.
func Canonical(name string) string {
	if name == LegacyLocalName {
		return LocalName
	}
	return name
}

// ParamArchiveOnDelete is the class parameter that makes a released PV's
// storage be renamed to archived-<name> instead of removed.
const ParamArchiveOnDelete = "archiveOnDelete"

// ErrReschedule marks a provisioning failure of this node itself (the path
// is not writable, the disk is full): the claim's selected-node annotation
// is removed so that the scheduler can choose again.
var ErrReschedule = errors.New("this node cannot provision")

// Request is one claim to provision a volume for.
type Request struct {
	// Claim and Class are read-only snapshots.
	Claim *v1.PersistentVolumeClaim
	Class *storagev1.StorageClass
	// PVName is the name of the PV to create: pvc-<claim UID>, so that a
	// retry after a crash finds the same storage.
	PVName string
	// SelectedNode is the claim's AnnSelectedNode ("" when it has none).
	SelectedNode string
	// PVs, when set, lists the PersistentVolumes that exist now, as the
	// caller knows them (with those it created a moment ago). A provisioner
	// whose storage could overlap another PV's (nfs-subdir's pathPattern)
	// refuses a volume that would. Manifest mode's binder lists its source's
	// and those it provisioned (recorded).
	PVs func() []*v1.PersistentVolume
	// Tentative says that the caller creates the PV only after it has read
	// the claim again, and then tells a Settler how it went: Commit once
	// the PV exists, Abandon when the claim went away first. Until then a
	// Settler may keep a record, in the storage, of what this call made, so
	// that a restart can tell it from storage that was there before.
	Tentative bool
	// Content, when set, is what the new volume starts with: a copy of
	// another volume (a clone) or of a snapshot. Nil: an empty volume.
	Content *Content
}

// Content is the data source of a new volume: exactly one field is set.
// A provisioner refuses a source it did not make.
type Content struct {
	// Volume is a PV this provisioner made (the source claim's): the new
	// volume is a clone of it.
	Volume *v1.PersistentVolume
	// Snapshot is a snapshot this provisioner made, by the name its
	// storage gives it: the new volume is restored from it.
	Snapshot string
}

// Volume is what a provisioner made for a Request: the PV's source, its
// node affinity and annotations of its own. NewPV adds the rest.
type Volume struct {
	Source       v1.PersistentVolumeSource
	NodeAffinity *v1.VolumeNodeAffinity
	Annotations  map[string]string
}

// Provisioner creates and deletes the storage of one provisioner name.
type Provisioner interface {
	// Name is the StorageClass provisioner it serves (LocalName, ...).
	Name() string
	// Provision creates the storage for req, or finds what an earlier call
	// for the same PV name made, and describes it. An error wrapping
	// ErrReschedule says this node cannot provision at all.
	Provision(ctx context.Context, req Request) (Volume, error)
	// MoveAside moves the storage of pv, released, aside: within its file
	// system, to a name no claim's storage can have, where no new pod can
	// reach it, until Delete or Restore. Storage already aside, or gone, is
	// not an error.
	MoveAside(ctx context.Context, pv *v1.PersistentVolume) error
	// Restore moves the storage of pv back from aside. Storage already in
	// place is not an error; storage gone is (it wraps ErrGone).
	Restore(ctx context.Context, pv *v1.PersistentVolume) error
	// Delete removes or archives (AnnArchiveOnDelete) the storage of pv,
	// which this provisioner made, whether aside or in place. Storage
	// already gone is not an error. It never removes anything the PV does
	// not point at.
	//
	// MoveAside, Restore and Delete refuse, with an error wrapping
	// ErrInUse, while a mount elsewhere on this node shows the storage.
	Delete(ctx context.Context, pv *v1.PersistentVolume) error
}

// ErrInUse marks a refusal to move or delete storage that a mount on this
// node shows: a pod still has it.
var ErrInUse = storagedir.ErrInUse

// ErrGone marks storage that is neither in place nor aside.
var ErrGone = storagedir.ErrGone

// Settler is a Provisioner whose storage may exist before Provision, and
// belong to someone else: an nfs-subdir pathPattern can name any directory
// of an export. Storage provisioned for a claim that went away before its
// PV was used must then not simply be deleted, as Delete would. After a
// Tentative Provision, the cluster controller calls one of:
type Settler interface {
	// Commit says pv, made for what Provision returned, exists: the record
	// of the unfinished storage goes, the storage stays. It is idempotent.
	Commit(ctx context.Context, pv *v1.PersistentVolume) error
	// Abandon says pv will never be used: it was not created, or was
	// created for a claim that is gone. It removes the storage only when
	// Provision made it for pv and nothing was written in it since, and no
	// other PV of req.PVs uses it. Otherwise it keeps it, and kept says why.
	Abandon(ctx context.Context, req Request, pv *v1.PersistentVolume) (kept string, err error)
}

// Resumer is a Settler whose records of unfinished provisionings outlive
// a restart: storage made by a Tentative Provision whose PV was never
// created, when the agent stopped before it could Commit or Abandon. After
// its caches have synced, the cluster controller settles each one: Commit
// when the PV exists, Abandon when the claim is gone (read from the API
// server: a claim of that UID never comes back), nothing while the claim
// is there (its provisioning goes on and finds the storage).
type Resumer interface {
	Settler
	Unsettled(ctx context.Context) ([]Unsettled, error)
}

// Unsettled is one provisioning a Resumer recorded and never settled: the
// PV it was for, as NewPV would have made it, and its claim (namespace,
// name and UID).
type Unsettled struct {
	PV    *v1.PersistentVolume
	Claim *v1.PersistentVolumeClaim
}

// PVName is the name of the PV provisioned for claim: pvc-<uid>.
func PVName(claim *v1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

// NewPV assembles the PersistentVolume for req from vol: the claim's access
// modes, volume mode and requested capacity; the class's reclaim policy
// (Delete when unset) and mount options; a claimRef to the claim (name,
// namespace, UID); AnnProvisionedBy and vol's annotations. AnnProvisionedBy
// is the name the class gives when it is another name of provisioner
// (LegacyLocalName), so that an agent that knows only that name still
// recognises the PV as its own.
func NewPV(req Request, provisioner string, vol Volume) *v1.PersistentVolume {
	if Canonical(req.Class.Provisioner) == provisioner {
		provisioner = req.Class.Provisioner
	}
	ann := map[string]string{AnnProvisionedBy: provisioner}
	for k, v := range vol.Annotations {
		ann[k] = v
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if req.Class.ReclaimPolicy != nil {
		reclaim = *req.Class.ReclaimPolicy
	}
	c := req.Claim
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: req.PVName, Annotations: ann},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: requested(c)},
			AccessModes:                   append([]v1.PersistentVolumeAccessMode(nil), c.Spec.AccessModes...),
			VolumeMode:                    c.Spec.VolumeMode,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              req.Class.Name,
			MountOptions:                  append([]string(nil), req.Class.MountOptions...),
			PersistentVolumeSource:        vol.Source,
			NodeAffinity:                  vol.NodeAffinity,
			ClaimRef: &v1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID,
			},
		},
	}
}

// requested is the claim's storage request, or zero.
func requested(c *v1.PersistentVolumeClaim) resource.Quantity {
	if q, ok := c.Spec.Resources.Requests[v1.ResourceStorage]; ok {
		return q.DeepCopy()
	}
	return resource.Quantity{}
}

// ArchiveOnDelete reads the class parameter archiveOnDelete: "true" or
// "false" (any case); unset is false. Anything else is an error, so a typo
// never deletes data the user meant to archive.
func ArchiveOnDelete(class *storagev1.StorageClass) (bool, error) {
	v, ok := class.Parameters[ParamArchiveOnDelete]
	if !ok {
		return false, nil
	}
	switch {
	case strings.EqualFold(v, "true"):
		return true, nil
	case strings.EqualFold(v, "false"):
		return false, nil
	}
	return false, fmt.Errorf("StorageClass %s: parameter archiveOnDelete %q: want \"true\" or \"false\"", class.Name, v)
}

// Expander is a Provisioner that grows the storage it made while pods use
// it (a class's allowVolumeExpansion). Expand grows the storage of pv to
// size bytes; the size it has already is nothing to do, a smaller one is
// refused. It is idempotent: a call interrupted by a crash is made again.
type Expander interface {
	Expand(ctx context.Context, pv *v1.PersistentVolume, size int64) error
}
