// Package volume defines what the volume manager and the volume plugins share:
// the description of one pod volume (Spec), the Plugin interface every volume
// type implements, and the optional capabilities a plugin may add.
//
// It owns no state and performs no I/O. Plugins must never mutate a Spec: the
// pod and the objects it points at are shared, read-only snapshots.
package volume

import (
	"context"
	"errors"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ErrNotFound is returned by Objects when the named object does not exist.
var ErrNotFound = errors.New("not found")

// ErrNotReady is returned (wrapped) by Objects and by Versioner when an
// input is not known yet — a watch that has not delivered its first list.
// It is not a failure: the volume waits, Pending, until the input is known.
var ErrNotReady = errors.New("not known yet")

// Objects looks up the API objects a pod's volumes refer to, from the source
// the pod came from (the manifest directory or the API server). A lookup
// returns an error wrapping ErrNotFound when the object does not exist, and
// one wrapping ErrNotReady while that is not known yet.
type Objects interface {
	ConfigMap(namespace, name string) (*v1.ConfigMap, error)
	Secret(namespace, name string) (*v1.Secret, error)
	// PersistentVolumeClaim returns a claim as bound by the cluster's PV
	// controller (from manifests: by the agent's binder).
	PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error)
	// PersistentVolume returns a PersistentVolume, with its claimRef and
	// phase as bound.
	PersistentVolume(name string) (*v1.PersistentVolume, error)
}

// ClaimNotBound is the condition a binder puts on the view of a claim it
// has not bound, with the reason as its message, so that the volumes that
// use the claim say why they wait.
const ClaimNotBound v1.PersistentVolumeClaimConditionType = "volume-agent.io/NotBound"

// ClaimRemoved is the condition a binder puts on the view of a claim
// removed from its source whose binding it keeps (a pod that is not
// terminated still names it, or the removal does not count yet), with
// why as its message: the words GET /v1/claims shows for the claim, so
// that the pod's volume says the same. Such a claim is being deleted, as
// one a cluster's pvc-protection finalizer holds (deletionTimestamp set).
const ClaimRemoved v1.PersistentVolumeClaimConditionType = "volume-agent.io/Removed"

// Spec is one volume of one pod, with everything a plugin needs to set it up.
type Spec struct {
	// Pod is the pod as last seen by its source. Read-only.
	Pod *v1.Pod
	// Volume is the entry of pod.spec.volumes this spec describes. Read-only.
	Volume *v1.Volume
	// Objects resolves the ConfigMaps and Secrets the volume refers to.
	Objects Objects
	// Node is this node's object when the source knows it (labels, allocatable); may be nil.
	Node *v1.Node
	// Source names the pod source the pod came from ("manifests", "api").
	Source string
	// Claim and PV are set for a persistentVolumeClaim volume: the claim
	// and the PersistentVolume it is bound to. Read-only.
	Claim *v1.PersistentVolumeClaim
	PV    *v1.PersistentVolume
}

// ReadOnly reports whether the volume must be mounted read-only: readOnly
// on the pod's persistentVolumeClaim volume or on its PV's source (nfs,
// csi).
func (s *Spec) ReadOnly() bool {
	if c := s.Volume.PersistentVolumeClaim; c != nil && c.ReadOnly {
		return true
	}
	if s.PV != nil && s.PV.Spec.NFS != nil && s.PV.Spec.NFS.ReadOnly {
		return true
	}
	if s.PV != nil && s.PV.Spec.CSI != nil && s.PV.Spec.CSI.ReadOnly {
		return true
	}
	return s.Volume.NFS != nil && s.Volume.NFS.ReadOnly
}

// Result is what SetUp reports about a volume it set up.
type Result struct {
	// Path is where the volume's content is on the host: the volume directory,
	// or for hostPath the host path itself.
	Path string
	// Swap says whether the volume's memory may be written to swap; it is
	// SwapUnknown for a volume that is not on a tmpfs, and for one whose
	// tmpfs was mounted before this set-up.
	Swap Swap
}

// Swap tells whether the pages of a memory-backed volume (a tmpfs) may be
// written to the node's swap.
type Swap uint8

const (
	// SwapUnknown: not on a tmpfs, or the tmpfs was mounted before and its
	// options were not read.
	SwapUnknown Swap = iota
	// SwapNever: mounted with noswap.
	SwapNever
	// SwapAllowed: mounted without noswap (a kernel before Linux 6.4, or
	// a volume mounted before the agent added it): its pages may reach
	// swap when the node has swap on.
	SwapAllowed
)

// SwapOf is the Swap of a tmpfs mounted with noswap or without.
func SwapOf(noSwap bool) Swap {
	if noSwap {
		return SwapNever
	}
	return SwapAllowed
}

// Plugin sets up and tears down one type of volume.
type Plugin interface {
	// Name is the plugin's kubelet name, e.g. "kubernetes.io/configmap".
	Name() string
	// CanSupport reports whether the plugin handles this pod volume.
	CanSupport(v *v1.Volume) bool
	// SetUp makes the volume's content available in dir, creating dir as
	// needed. It must be idempotent: on a volume that is already set up it
	// must neither remount nor lose data, only bring content up to date.
	// On error it undoes what this call did, but never removes data that was
	// there before.
	SetUp(ctx context.Context, spec *Spec, dir string) (Result, error)
	// TearDown unmounts what SetUp mounted in dir and removes dir. It needs
	// no Spec, so a volume found on disk after a restart can be torn down.
	// It never follows a symlink out of dir, never crosses into a mount
	// nested inside it, and never deletes data that lives outside the agent's
	// root directory.
	TearDown(ctx context.Context, dir string) error
}

// Versioner is implemented by plugins whose content can change while the pod
// runs (configMap, secret, downwardAPI, projected). ContentVersion must be
// cheap — it runs on every change of the desired state — and must change
// whenever the content SetUp would write changes (a version may also change
// when the content does not; SetUp then rewrites nothing). The reconciler
// calls SetUp again when the version in the desired state differs from the
// version the last successful SetUp was asked to write.
type Versioner interface {
	ContentVersion(spec *Spec) (string, error)
}

// mountOptionsAnnotation is the legacy way to give a PV's mount options.
const mountOptionsAnnotation = "volume.beta.kubernetes.io/mount-options"

// MountOptions returns a PV's mount options, as the kubelet takes them:
// the legacy annotation (comma-separated) when it is set, else
// spec.mountOptions. A nil PV has none.
func MountOptions(pv *v1.PersistentVolume) []string {
	if pv == nil {
		return nil
	}
	if v, ok := pv.Annotations[mountOptionsAnnotation]; ok {
		var opts []string
		for o := range strings.SplitSeq(v, ",") {
			if o = strings.TrimSpace(o); o != "" {
				opts = append(opts, o)
			}
		}
		return opts
	}
	return pv.Spec.MountOptions
}

// PVPlugin is implemented by plugins that serve PersistentVolumes: a pod's
// persistentVolumeClaim volume goes to the plugin whose CanSupportPV
// accepts the claim's PV.
type PVPlugin interface {
	CanSupportPV(pv *v1.PersistentVolume) bool
}

// Checker is implemented by plugins whose volumes can die while mounted (a
// network file system): Check tells a live volume from a dead one, within
// ctx and without hanging on a server that does not answer. The
// reconciler checks mounted volumes now and then; a dead one becomes
// Uncertain, and is set up again, with backoff, until it lives.
type Checker interface {
	Check(ctx context.Context, dir string) error
}

// Sweeper is implemented by plugins that keep mounts shared by several
// volumes (a local PV's device): Sweep takes down those no volume uses any
// more. The reconciler calls it once every source has synced after a start.
type Sweeper interface {
	Sweep(ctx context.Context) error
}

// BlockMapper is implemented by plugins that serve PersistentVolumes of
// volumeMode Block: the volume is a device a container gets through
// volumeDevices, not a directory. MapDevice publishes the PV's device at
// path, a file (<root>/pods/<uid>/volumeDevices/<plugin>/<pv>) that the
// runtime hands to the container; like SetUp it is idempotent and undoes
// what it did on error. UnmapDevice takes off what MapDevice made at path,
// and never removes or changes the device itself.
type BlockMapper interface {
	MapDevice(ctx context.Context, spec *Spec, path string) (Result, error)
	UnmapDevice(ctx context.Context, path string) error
}

// Block reports whether pv has volumeMode Block: its volumes are devices.
func Block(pv *v1.PersistentVolume) bool {
	return pv != nil && pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock
}

// Validator is implemented by plugins that can reject a volume spec without
// any I/O. An error is permanent for that spec: the volume is reported
// Failed and not attempted until the spec changes.
type Validator interface {
	Validate(spec *Spec) error
}
