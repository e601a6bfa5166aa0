package status

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/subpath"
	"github.com/volume-agent/volume-agent/internal/usage"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// Volume states shown by the API; a volume of a Terminating pod is
// Terminating, one of a Held pod Held.
const (
	Pending     = "Pending"
	Mounted     = "Mounted"
	Failed      = "Failed"
	Unsupported = "Unsupported"
)

// Pod states shown by the API.
const (
	// Active: the pod is in a source.
	Active = "Active"
	// Terminating: the pod is gone from the sources, and volumes or a
	// directory of it are still on the node: being torn down, or stuck
	// (Reason says why).
	Terminating = "Terminating"
	// Held: the pod was found on disk at start and no source lists it,
	// but that does not count as its removal yet (Reason says why: an
	// empty manifest directory, a source not synced); its volumes are
	// kept as they are.
	Held = "Held"
)

// Pod is one pod in the API.
type Pod struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Ready     bool   `json:"ready"`
	State     string `json:"state"`
	// Reason says, for a Terminating pod, why its teardown has not
	// finished: the error of the last teardown of one of its volumes, or
	// of the removal of its directory (empty while nothing has failed);
	// for a Held pod, why its removal does not count yet.
	Reason  string   `json:"reason,omitempty"`
	Volumes []Volume `json:"volumes"`
}

// Volume is one volume of a pod in the API. It never carries content.
type Volume struct {
	Name   string `json:"name"`
	Plugin string `json:"plugin"`
	// Path is where the volume's content is on the host; empty until set up.
	Path  string `json:"path"`
	State string `json:"state"`
	Error string `json:"error"`
	// Claim and PV name, for a persistentVolumeClaim volume, the claim and
	// the PersistentVolume it is bound to (once known).
	Claim string `json:"claim,omitempty"`
	PV    string `json:"pv,omitempty"`
	// Mode is "Block" for a claim's volume of volumeMode Block: Path is
	// then the file on which its device is published, for the runtime to
	// give the containers that list it in volumeDevices. Absent for a
	// volume mounted on a directory.
	Mode string `json:"mode,omitempty"`
	// ReadOnly says, for a Block volume, that the pod's claim asks for it
	// read-only: a mount cannot keep a device from being written, so the
	// runtime must give it to the containers read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
	// NoSwap says, for a volume on a tmpfs (secret, projected, emptyDir of
	// medium Memory) once set up, whether the tmpfs was mounted with
	// noswap: false when its pages may reach swap (a kernel before Linux
	// 6.4, or a volume mounted by an agent that did not add noswap).
	// Absent for a volume on disk, and where the agent does not know (a
	// tmpfs mounted before a restart whose mount table it could not read;
	// --unprivileged, which mounts nothing).
	NoSwap *bool `json:"noSwap,omitempty"`
	// Since is when the agent first saw the volume in State (UTC, whole
	// seconds; at most the agent's start); absent when the Worlds were not
	// given to a Server.
	Since time.Time `json:"since,omitzero"`
	// Usage is the latest measurement of the space and inodes the volume
	// uses, for a Mounted emptyDir or claim volume once measured; absent
	// otherwise.
	Usage *Usage `json:"usage,omitempty"`
	// SizeLimitExceeded says that the volume, a disk emptyDir whose
	// sizeLimit its file system does not enforce, used more than its
	// sizeLimit at its latest measurement; Warning then says how much
	// ("Usage of EmptyDir volume … exceeds the limit …: … bytes used").
	// The agent does not stop the pod: the runtime decides what to do, as
	// the kubelet's eviction manager would (it evicts such a pod).
	SizeLimitExceeded bool   `json:"sizeLimitExceeded,omitempty"`
	Warning           string `json:"warning,omitempty"`
	// LimitNotEnforced says why the size of a volume the agent limits
	// with a btrfs qgroup (a disk emptyDir's sizeLimit, an enforced
	// claim's size) is not enforced at its latest measurement: btrfs
	// quotas off, the limit not made again, more nested subvolumes than
	// the agent limits. Each measurement makes the limit again; absent
	// while it holds.
	LimitNotEnforced string `json:"limitNotEnforced,omitempty"`
	// SubPaths are the subPath mounts the pod's containers want of the
	// volume, in the order of the containers (init first) and of their
	// volumeMounts; absent when there are none.
	SubPaths []SubPath `json:"subPaths,omitempty"`
}

// SubPath is one subPath mount of a volume: a runtime mounts Path (a
// bind mount of the subPath, prepared by the agent) into the container
// rather than the volume's path joined with the subPath. Path is empty
// until prepared; Error says why it is not (refused, or failed).
type SubPath struct {
	Container string `json:"container"`
	Index     int    `json:"index"`
	SubPath   string `json:"subPath"`
	Path      string `json:"path,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Usage is a volume's usage: its file system's capacity and what is still
// available, the bytes (st_blocks*512) and inodes it uses, how it was
// measured ("statfs": the volume is its own file system; "quota": a btrfs
// subvolume's qgroup, its limit the capacity; "walk": a du-style walk of
// its directory, capacity and available being those of the file system it
// is on) and when (UTC, whole seconds). For a disk emptyDir whose
// sizeLimit its file system does not enforce, the capacity is that
// sizeLimit, and what is available what it still leaves, so that
// used/capacity compares with the limit as it does for a claim.
type Usage struct {
	CapacityBytes  uint64    `json:"capacityBytes"`
	AvailableBytes uint64    `json:"availableBytes"`
	UsedBytes      uint64    `json:"usedBytes"`
	Inodes         uint64    `json:"inodes"`
	InodesFree     uint64    `json:"inodesFree"`
	InodesUsed     uint64    `json:"inodesUsed"`
	Method         string    `json:"method"`
	Time           time.Time `json:"time"`
	// SizeLimitBytes is, for a disk emptyDir whose sizeLimit its file
	// system does not enforce, that sizeLimit: the usage the agent
	// watches; absent otherwise.
	SizeLimitBytes int64 `json:"sizeLimitBytes,omitempty"`
}

// UsageReader gives the latest measurement of each volume, and the pods
// whose measurements changed.
type UsageReader interface {
	Usage(k dsw.Key) (usage.Measurement, bool)
	Watch() *dsw.Changes
}

// Worlds is what the status is computed from.
type Worlds struct {
	Desired *dsw.World
	Actual  *asw.World
	// Usage, when set, gives the volumes' usage.
	Usage UsageReader

	// clock records since when volumes are in their state; the Server
	// sets it (nil: no since).
	clock *stateClock
}

// Pods computes the status of every pod: the desired pods, then the
// Terminating ones.
func (w Worlds) Pods() []Pod {
	uids := w.uids()
	out := make([]Pod, 0, len(uids))
	for _, uid := range uids {
		if p, ok := w.Pod(string(uid)); ok { // not gone since uids
			out = append(out, p)
		}
	}
	return out
}

// Pod computes the status of one pod; its cost does not grow with the
// number of pods.
func (w Worlds) Pod(uid string) (Pod, bool) {
	if w.clock != nil {
		return w.clock.pod(w, types.UID(uid))
	}
	p, _, ok := compute(w, types.UID(uid))
	return p, ok
}

// compute is the status of pod uid, and the key of each of its volumes
// (the name of its directory), in the order of the status's volumes.
func compute(w Worlds, uid types.UID) (Pod, []string, bool) {
	p, ok := w.Desired.Pod(uid)
	if !ok {
		return w.terminatingPod(uid)
	}
	actual, _ := w.Actual.PodVolumes(uid)
	keys := make([]string, len(p.Volumes))
	for i, v := range p.Volumes {
		keys[i] = v.Name
	}
	return w.pod(p, actual), keys, true
}

// pod computes the status of p from its set-up volumes, sorted by name.
func (w Worlds) pod(p dsw.Pod, actual []asw.Volume) Pod {
	out := Pod{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Ready: true, State: Active, Volumes: make([]Volume, 0, len(p.Volumes))}
	for _, d := range p.Volumes {
		key := dsw.Key{PodUID: p.UID, Volume: d.Name}
		i, ok := slices.BinarySearchFunc(actual, d.Name, func(a asw.Volume, name string) int { return strings.Compare(a.Name, name) })
		var a asw.Volume
		if ok {
			a = actual[i]
		}
		v := volumeStatus(d, a, ok, w.Desired.Error(key))
		v.SubPaths = subPaths(d.SubPaths, a.SubPaths)
		if v.State == Mounted && subPathFailed(v.SubPaths) {
			v.State = Failed // its containers with a subPath cannot start
			v.Error = cmp.Or(v.Error, firstSubPathError(v.SubPaths))
		}
		if v.State == Mounted && w.Usage != nil {
			w.addUsage(&v, key)
		}
		out.Ready = out.Ready && (v.State == Mounted || d.Kept)
		out.Volumes = append(out.Volumes, v)
	}
	return out
}

// volumeStatus: Mounted for a kept volume that left the spec; Failed for a
// volume in conflict with another over its directory, whatever is set up
// there (it belongs to neither); Unsupported and Failed for spec problems;
// Mounted once set
// up with the desired plugin (an error then is a failed refresh: the old
// content stays); Failed after a failed set-up; Pending otherwise.
func volumeStatus(d dsw.Volume, a asw.Volume, have bool, opErr string) Volume {
	v := volumeState(d, a, have, opErr)
	v.Mode, v.ReadOnly = mode(d, a, have, v.State)
	return v
}

// volumeState is volumeStatus but for the mode.
func volumeState(d dsw.Volume, a asw.Volume, have bool, opErr string) Volume {
	v := Volume{Name: cmp.Or(d.SpecName, d.Name), Plugin: d.Plugin, Error: opErr, Claim: d.Claim, PV: d.PV}
	switch {
	case d.Kept && have:
		// Not in the pod's spec: kept as it is on disk, untouched, until
		// the pod goes (after a restart its state is Uncertain, but no
		// container uses it, so it is not set up again).
		v.State, v.Path, v.Plugin, v.Error, v.NoSwap = Mounted, a.Path, a.Plugin, d.Problem, noSwap(a.Swap)
	case d.Conflict:
		v.State, v.Error = Failed, d.Problem
	case d.Unsupported:
		v.State, v.Error = Unsupported, d.Problem
	case d.Problem != "" && !(have && a.State == asw.Mounted):
		v.State, v.Error = Failed, d.Problem
	case have && a.State == asw.Mounted && (a.Plugin == d.Plugin || d.Plugin == ""):
		v.State, v.Path, v.Plugin, v.NoSwap = Mounted, a.Path, a.Plugin, noSwap(a.Swap)
		if d.Problem != "" {
			v.Error = d.Problem
		}
	case opErr != "":
		v.State = Failed
	case d.Waiting != "":
		v.State, v.Error = Pending, "waiting: "+d.Waiting
	default:
		v.State = Pending
	}
	return v
}

// subPaths is the status of the subPath mounts wants lists, from what
// the last preparation did (got; nil before one).
func subPaths(wants []subpath.Want, got *subpath.Outcome) []SubPath {
	if len(wants) == 0 {
		return nil
	}
	out := make([]SubPath, len(wants))
	for i, w := range wants {
		out[i] = SubPath{Container: w.Container, Index: w.Index, SubPath: w.Path, Error: w.Problem}
		if w.Problem != "" || got == nil {
			continue
		}
		for _, m := range got.Mounts {
			if m.Container == w.Container && m.Index == w.Index && m.SubPath == w.Path {
				out[i].Path, out[i].Error = m.Path, m.Error
			}
		}
	}
	return out
}

func subPathFailed(s []SubPath) bool {
	return firstSubPathError(s) != ""
}

func firstSubPathError(s []SubPath) string {
	for _, p := range s {
		if p.Error != "" {
			return p.Error
		}
	}
	return ""
}

// mode is the API's mode of a volume and whether it is read-only: as the
// set-up volume shown is, or as the desired one is to be.
func mode(d dsw.Volume, a asw.Volume, have bool, state string) (string, bool) {
	block := d.Block
	if have && state == Mounted {
		block = a.Block
	}
	if !block {
		return "", false
	}
	return "Block", d.Spec != nil && d.Spec.Volume != nil && d.Spec.ReadOnly()
}

// addUsage adds the usage of volume k to v, once measured, and whether it
// exceeds its size limit.
func (w Worlds) addUsage(v *Volume, k dsw.Key) {
	m, ok := w.Usage.Usage(k)
	if !ok {
		return
	}
	v.Usage = &Usage{CapacityBytes: m.CapacityBytes, AvailableBytes: m.AvailableBytes, UsedBytes: m.UsedBytes,
		Inodes: m.Inodes, InodesFree: m.InodesFree, InodesUsed: m.InodesUsed, Method: m.Method, Time: m.Time,
		SizeLimitBytes: m.SizeLimitBytes}
	if m.Exceeded() {
		v.SizeLimitExceeded, v.Warning = true, usage.ExceededMessage(v.Name, m)
	}
	v.LimitNotEnforced = m.NotEnforced
}

// noSwap is the API's noSwap of a volume whose swap is s.
func noSwap(s volume.Swap) *bool {
	if s == volume.SwapUnknown {
		return nil
	}
	never := s == volume.SwapNever
	return &never
}

// VolumesByState counts the volumes of every pod in each state; every
// state is present, possibly with 0.
func (w Worlds) VolumesByState() map[string]int {
	counts := map[string]int{Pending: 0, Mounted: 0, Failed: 0, Unsupported: 0, Terminating: 0, Held: 0}
	for _, p := range w.Pods() {
		for _, v := range p.Volumes {
			counts[v.State]++
		}
	}
	return counts
}
