package main

import (
	"fmt"
	"path/filepath"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/csi"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
	volumeusage "github.com/volume-agent/volume-agent/internal/usage"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// usageTargets are the volumes whose usage is measured: every emptyDir
// and claim volume of a desired pod that is set up (Mounted), named as
// its pod's spec names it. A claim bound to a hostPath PV is left out, as
// the kubelet leaves hostPath out: its path is any directory of the host,
// "/" included, and walking it is not the agent's business. A Block
// volume is a device, not a file system: it is left out too.
type usageTargets struct {
	desired *dsw.World
	actual  *asw.World
	// hostRoot is --host-root: where a PV's local path is reached.
	hostRoot string
	// localRoot is the local provisioner's root, resolved ("" when it
	// is off): where a CSI PV of the local driver is reached.
	localRoot string
}

var _ volumeusage.Targets = usageTargets{}

func (t usageTargets) UsageTargets() []volumeusage.Target {
	var out []volumeusage.Target
	for _, p := range t.desired.Pods() {
		for _, d := range p.Volumes {
			if (d.Plugin != emptydir.Name && d.Claim == "") || d.Plugin == hostpath.Name || d.Block {
				continue
			}
			key := dsw.Key{PodUID: p.UID, Volume: d.Name}
			a, ok := t.actual.Get(key)
			if !ok || !measurable(d, a) {
				continue
			}
			name := d.SpecName
			if name == "" {
				name = d.Name
			}
			tg := volumeusage.Target{Key: key, Namespace: p.Namespace, Pod: p.Name, Volume: name, Claim: d.Claim, Path: a.Path,
				SizeLimit: watchedSizeLimit(d), QuotaLimit: quotaLimit(d)}
			if tg.QuotaLimit > 0 && d.Claim != "" {
				// The local provisioner's btrfs volume (quotaLimit checked
				// its PV), reached where its parent is on the same btrfs.
				tg.QuotaPath = t.volumePath(d.Spec.PV)
			}
			out = append(out, tg)
		}
	}
	return out
}

// measurable reports whether the set-up volume a of d is measured: once
// mounted; and a claim's volume kept as it is while its claim is being
// deleted, which is never set up again (after a restart it stays
// Uncertain), once a mount of it was found at start. A published device
// is not.
func measurable(d dsw.Volume, a asw.Volume) bool {
	if a.Path == "" || a.Block {
		return false
	}
	return a.State == asw.Mounted || (d.Deleting && d.Kept && a.Access != asw.AccessUnknown)
}

// watchedSizeLimit is the sizeLimit of a disk emptyDir in bytes, 0 for
// any other volume: a Memory emptyDir's tmpfs has the limit as its size.
func watchedSizeLimit(d dsw.Volume) int64 {
	if d.Plugin != emptydir.Name || d.Spec == nil || d.Spec.Volume == nil || d.Spec.Volume.EmptyDir == nil {
		return 0
	}
	e := d.Spec.Volume.EmptyDir
	if e.Medium != v1.StorageMediumDefault || e.SizeLimit == nil || e.SizeLimit.Sign() <= 0 {
		return 0
	}
	return e.SizeLimit.Value()
}

// quotaLimit is the btrfs qgroup limit a volume's subvolume must have, for
// the usage pass to make it again where it is gone (volumeusage.Target):
// a disk emptyDir's sizeLimit with room for metadata, the size of a claim
// whose PV the local provisioner made on btrfs (its capacity: a
// resize raises it; a limit is never lowered); 0 for any other, and for a
// read-only claim, which no pod can write and whose read-only mount takes
// no qgroup change. A volume that turns out not to be a subvolume (a
// sizeLimit emptyDir on a file system without quotas) is only watched.
func quotaLimit(d dsw.Volume) int64 {
	if size := watchedSizeLimit(d); size > 0 {
		return emptydir.QgroupLimit(size)
	}
	if d.Spec == nil || d.Spec.PV == nil || d.Spec.Volume == nil || capacityKind(d.Spec.PV) != "btrfs" || d.Spec.ReadOnly() {
		return 0
	}
	q, ok := d.Spec.PV.Spec.Capacity[v1.ResourceStorage]
	if !ok || q.Sign() <= 0 {
		return 0
	}
	return q.Value()
}

// volumePath is where the local provisioner's volume of pv is reached
// from the agent: an in-tree local PV's path under --host-root, a CSI
// PV's volume handle under the local path root ("" when it is off: the
// volume is then not set up at all).
func (t usageTargets) volumePath(pv *v1.PersistentVolume) string {
	switch {
	case pv.Spec.Local != nil:
		return filepath.Join(t.hostRoot, pv.Spec.Local.Path)
	case pv.Spec.CSI != nil && t.localRoot != "":
		return filepath.Join(t.localRoot, pv.Spec.CSI.VolumeHandle)
	}
	return ""
}

// capacityKind is the backend the local provisioner made pv's volume
// with ("" for a plain directory): the annotation of an in-tree local PV,
// or the volume context the CSI driver returned for one of its own. Either
// can be written by others; the usage pass only makes a limit again on a
// volume that is a subvolume, never one larger than the PV's capacity.
func capacityKind(pv *v1.PersistentVolume) string {
	if c := pv.Spec.CSI; c != nil {
		if c.Driver != provisioner.LocalName {
			return ""
		}
		return c.VolumeAttributes[csi.ContextCapacity]
	}
	return pv.Annotations[local.AnnCapacity]
}

// sizeLimitEvents sends the Warning event of a volume over its size limit.
type sizeLimitEvents interface {
	SizeLimitExceeded(spec *volume.Spec, message string)
	LimitNotEnforced(spec *volume.Spec, message string)
}

// sizeLimitReporter reports a disk emptyDir that passed its sizeLimit: a
// warn log line, and in cluster mode a SizeLimitExceeded Warning event on
// its pod (a pod of the manifests exists in no API server). The agent
// does not stop the pod: the runtime decides, as the kubelet's eviction
// manager would.
type sizeLimitReporter struct {
	desired *dsw.World
	events  sizeLimitEvents // nil without a cluster
	log     *zap.Logger
}

var (
	_ volumeusage.Reporter            = sizeLimitReporter{}
	_ volumeusage.EnforcementReporter = sizeLimitReporter{}
)

// LimitNotEnforced sends, in cluster mode, a LimitNotEnforced Warning
// event on the pod of a volume whose btrfs qgroup limit is gone (the
// usage pass logs it already, and makes it again at each measurement).
func (r sizeLimitReporter) LimitNotEnforced(s volumeusage.Stat) {
	if r.events == nil {
		return
	}
	what := fmt.Sprintf("volume %q", s.Volume)
	if s.Claim != "" {
		what = fmt.Sprintf("volume %q (claim %s)", s.Volume, s.Claim)
	}
	if d, ok := r.desired.Volume(s.Key); ok && d.Spec != nil {
		r.events.LimitNotEnforced(d.Spec, fmt.Sprintf("The size of %s is not enforced: %s", what, s.NotEnforced))
	}
}

func (r sizeLimitReporter) SizeLimitExceeded(s volumeusage.Stat) {
	r.log.Warn("emptyDir volume over its sizeLimit", zap.String("pod", s.Namespace+"/"+s.Pod), zap.String("podUID", string(s.Key.PodUID)),
		zap.String("volume", s.Volume), zap.Uint64("usedBytes", s.UsedBytes), zap.String("sizeLimit", volumeusage.LimitString(s.SizeLimitBytes)))
	if r.events == nil {
		return
	}
	if d, ok := r.desired.Volume(s.Key); ok && d.Spec != nil {
		r.events.SizeLimitExceeded(d.Spec, volumeusage.ExceededMessage(s.Volume, s.Measurement))
	}
}
