// Package asw holds the actual state of the world: which volumes are set up
// for which pod, in which state, with which content version, and which pod
// directories exist on disk. It keeps what is needed to name a pod and its
// volumes once the pod has left the desired state (namespace, name, the
// volumes' names in the spec and their PVs), and why a teardown failed, so
// that a teardown that cannot finish is shown rather than hidden.
//
// Only the operation executor (after an operation) and reconstruction (at
// start) write it. The world performs no I/O.
package asw

import (
	"cmp"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/subpath"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// State is what the agent knows about a volume on disk.
type State string

const (
	// Mounted: SetUp succeeded; the content is in place.
	Mounted State = "Mounted"
	// Uncertain: the volume may be (partly) set up — found on disk after a
	// restart, or an operation's outcome is unknown (it timed out). The
	// reconciler sets it up again, which is idempotent, or tears it down.
	Uncertain State = "Uncertain"
)

// Volume is one volume set up for one pod.
type Volume struct {
	PodUID  types.UID
	Name    string
	Plugin  string
	Dir     string // the volume directory under the root
	Path    string // where the content is on the host (Dir, or a hostPath)
	State   State
	Version string // content version written by the last successful SetUp
	// Swap says whether the volume's tmpfs may reach swap: as the set-up
	// that mounted it reported, or as the mount table showed it at start.
	Swap volume.Swap
	// Reconstructed is true for a volume found on disk at start that no
	// operation has touched since.
	Reconstructed bool
	// Block: Dir is not a directory but the file on which a device is
	// published (volumeMode Block; layout.Root.DevicePath).
	Block bool
	// Access says whether the volume's mount is read-only: as the set-up
	// asked (dsw.Volume.ReadOnly), or, for a volume found on disk at
	// start, as the kernel's mount table shows its mount.
	Access Access
	// SpecName is the volume's name in its pod's spec when it differs
	// from Name, and PV the PersistentVolume of a claim's volume, as the
	// last set-up saw them: logs and the status name a volume by them once
	// its pod has left the desired state. Both are empty for a volume
	// found on disk at start and not set up since.
	SpecName, PV string
	// TearDownError is the error of the last teardown, while the volume
	// stays set up.
	TearDownError string
	// SubPaths is what the last set-up did of the volume's subPath
	// mounts; nil when it prepared none (or no set-up since start). It is
	// shared, never changed.
	SubPaths *subpath.Outcome
}

// Access is whether a volume's mount lets its pod write, as far as the
// agent knows.
type Access uint8

const (
	// AccessUnknown: no mount is known. A published device (its mount
	// says nothing of whether the device can be written), or a volume
	// found on disk at start that is not a mount point: a plain directory,
	// or a mount gone with a reboot, which a set-up mounts as its spec
	// asks.
	AccessUnknown Access = iota
	// ReadWrite: set up writable, or found mounted so.
	ReadWrite
	// ReadOnly: set up read-only, or found mounted so.
	ReadOnly
)

// AccessOf is the Access of a mount that is read-only or not.
func AccessOf(readOnly bool) Access {
	if readOnly {
		return ReadOnly
	}
	return ReadWrite
}

// ReadOnlyChanged reports whether the volume is known to be mounted
// otherwise than readOnly asks: writable when readOnly, read-only when
// not. A running pod's volume stays as it was set up (populator,
// immutable.go), so this is a change of spec that needs a new pod.
func (v Volume) ReadOnlyChanged(readOnly bool) bool {
	return v.Access != AccessUnknown && (v.Access == ReadOnly) != readOnly
}

// Key returns the volume's key.
func (v Volume) Key() dsw.Key { return dsw.Key{PodUID: v.PodUID, Volume: v.Name} }

// World is the actual state. Its methods are safe for concurrent use.
type World struct {
	onChange func()
	changes  dsw.Watchers

	mu      sync.Mutex
	pods    map[types.UID]*pod   // guarded by mu; pods with volumes
	podDirs map[types.UID]podDir // guarded by mu
	// generation counts changes to the sets of set-up volumes (see
	// Generation).
	generation uint64 // guarded by mu
}

// pod is the volumes set up for one pod.
type pod struct {
	volumes []Volume // sorted by name; a pod has a handful
	// generation is the world's generation when a volume of the pod was
	// last added, removed or given another plugin, mode or access.
	generation uint64
}

// New returns an empty world; onChange (may be nil) is called after every
// change, outside the lock.
func New(onChange func()) *World {
	if onChange == nil {
		onChange = func() {}
	}
	return &World{onChange: onChange, pods: map[types.UID]*pod{}, podDirs: map[types.UID]podDir{}}
}

// Watch returns a set fed with the UID of every pod whose volumes or
// directory change from now on, for a consumer that looks again at changed
// pods only.
func (w *World) Watch() *dsw.Changes { return w.changes.Watch() }

// Set records v, replacing what was known about its key; the pod's
// directory is recorded as existing.
func (w *World) Set(v Volume) {
	w.mu.Lock()
	p := w.pods[v.PodUID]
	if p == nil {
		p = &pod{}
		w.pods[v.PodUID] = p
	}
	old, had := p.set(v)
	if !had || old.Plugin != v.Plugin || old.Block != v.Block || old.Access != v.Access {
		w.generation++
		p.generation = w.generation
	}
	dirChanged := w.notePodDirLocked(v)
	changed := !had || old != v
	if changed || dirChanged {
		w.changes.Add(v.PodUID)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// SetTearDownError records why the last teardown of a volume failed; it
// does nothing for a volume that is not set up.
func (w *World) SetTearDownError(k dsw.Key, msg string) {
	w.mu.Lock()
	p := w.pods[k.PodUID]
	v, had := p.find(k.Volume)
	changed := had && v.TearDownError != msg
	if changed {
		v.TearDownError = msg
		p.set(v)
		w.changes.Add(k.PodUID)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// Delete forgets a volume (it was torn down). The pod directory stays known.
func (w *World) Delete(k dsw.Key) {
	w.mu.Lock()
	p := w.pods[k.PodUID]
	_, had := p.find(k.Volume)
	if had {
		i := p.index(k.Volume)
		p.volumes = slices.Delete(p.volumes, i, i+1)
		w.generation++
		p.generation = w.generation
		if len(p.volumes) == 0 {
			delete(w.pods, k.PodUID)
		}
		w.changes.Add(k.PodUID)
	}
	w.mu.Unlock()
	if had {
		w.onChange()
	}
}

// volumesOrNil returns p's volumes; a nil pod has none.
func (p *pod) volumesOrNil() []Volume {
	if p == nil {
		return nil
	}
	return p.volumes
}

// index returns where the volume name is, or would be, in p.volumes.
func (p *pod) index(name string) int {
	i, _ := slices.BinarySearchFunc(p.volumesOrNil(), name, func(v Volume, name string) int { return cmp.Compare(v.Name, name) })
	return i
}

// find returns the volume name of p (a nil pod has none).
func (p *pod) find(name string) (Volume, bool) {
	vols := p.volumesOrNil()
	if i := p.index(name); i < len(vols) && vols[i].Name == name {
		return vols[i], true
	}
	return Volume{}, false
}

// set records v in p and returns what it replaced.
func (p *pod) set(v Volume) (Volume, bool) {
	old, had := p.find(v.Name)
	if had {
		p.volumes[p.index(v.Name)] = v
	} else {
		p.volumes = slices.Insert(p.volumes, p.index(v.Name), v)
	}
	return old, had
}

// Get returns one volume.
func (w *World) Get(k dsw.Key) (Volume, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pods[k.PodUID].find(k.Volume)
}

// Volumes returns a snapshot of every volume, sorted by pod and name.
func (w *World) Volumes() []Volume {
	w.mu.Lock()
	out := make([]Volume, 0, len(w.pods)*4)
	for _, p := range w.pods {
		out = append(out, p.volumes...)
	}
	w.mu.Unlock()
	slices.SortFunc(out, compareVolumes)
	return out
}

// HasVolume reports whether any pod has a volume named name set up, in
// any state: for a claim's PersistentVolume, whose volumes are named after
// it, whether some pod on this node still has it.
func (w *World) HasVolume(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pods {
		if _, ok := p.find(name); ok {
			return true
		}
	}
	return false
}

// PodVolumes returns a snapshot of the volumes of one pod, sorted by name,
// and the pod's Generation at that moment.
func (w *World) PodVolumes(uid types.UID) ([]Volume, uint64) {
	w.mu.Lock()
	p := w.pods[uid]
	out := slices.Clone(p.volumesOrNil())
	gen := p.generationOrZero()
	w.mu.Unlock()
	return out, gen
}

// AppendPodVolumes appends the volumes of pod uid to dst, sorted by name:
// PodVolumes into a buffer of the caller's, for a caller that looks often.
func (w *World) AppendPodVolumes(dst []Volume, uid types.UID) []Volume {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(dst, w.pods[uid].volumesOrNil()...)
}

// Generation returns a number that changes whenever a volume of the pod is
// added or removed or changes plugin, mode or access (not when its state
// or version changes), for callers that cache what they derived from the
// set of set-up volumes of a pod. It is 0 for a pod without volumes.
func (w *World) Generation(uid types.UID) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pods[uid].generationOrZero()
}

func (p *pod) generationOrZero() uint64 {
	if p == nil {
		return 0
	}
	return p.generation
}

func compareVolumes(a, b Volume) int {
	return cmp.Or(cmp.Compare(a.PodUID, b.PodUID), cmp.Compare(a.Name, b.Name))
}
