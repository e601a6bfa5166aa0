// Package dsw holds the desired state of the world: for every pod that should
// run on this node, every volume it needs, the plugin that handles it and the
// version of the content it should have.
//
// The populator is the only writer of pods; the operation executor records
// the last error of each volume here so the status API can show it. The
// world performs no I/O and never decides what to do: the reconciler does.
package dsw

import (
	"slices"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// Volume is one volume a pod needs.
type Volume struct {
	// Name names the volume's directory, and its key within the pod: the
	// volume's name in the pod's spec or, for a claim bound to a
	// PersistentVolume, the PV's name, as the kubelet does.
	Name string
	// SpecName is the volume's name in the pod's spec when it differs
	// from Name.
	SpecName string
	// Claim and PV name, for a persistentVolumeClaim volume, the claim and
	// (once known) the PersistentVolume it is bound to.
	Claim, PV string

	Plugin string // plugin name; empty when no plugin supports the volume
	// Spec is what the plugin needs for SetUp. Read-only.
	Spec *volume.Spec
	// Version changes whenever SetUp would produce different content.
	Version string
	// Problem, when set, is a permanent problem with the spec (invalid or
	// unsupported): the volume is not attempted until the spec changes.
	Problem string
	// Unsupported marks a Problem caused by a volume type the agent lacks.
	Unsupported bool
	// Kept marks a volume that is set up (or was found on disk) but is not
	// in the pod's spec: it stays until the pod goes, with a Problem saying
	// why, and does not count for the pod's readiness.
	Kept bool
	// Waiting, when set, says which input of the content is not known yet
	// (a watch that has not listed): the volume is not set up or refreshed
	// until it is, and this is not a failure.
	Waiting string
}

// Pod is a pod that should run on this node.
type Pod struct {
	UID       types.UID
	Namespace string
	Name      string
	Source    string
	Volumes   []Volume // sorted by name
}

// Key names one volume of one pod.
type Key struct {
	PodUID types.UID
	Volume string
}

// World is the desired state. Its methods are safe for concurrent use.
type World struct {
	onChange func()

	mu        sync.Mutex
	pods      map[types.UID]Pod // guarded by mu
	errors    map[Key]string    // guarded by mu; last operation error per volume
	populated bool              // guarded by mu
}

// New returns an empty world; onChange (may be nil) is called after every
// change, outside the lock.
func New(onChange func()) *World {
	if onChange == nil {
		onChange = func() {}
	}
	return &World{onChange: onChange, pods: map[types.UID]Pod{}, errors: map[Key]string{}}
}

// SetPod adds or replaces a pod. Replacing a pod with one that differs only
// in its Spec pointers stores the new specs without signalling a change.
// The world keeps its own copy of p.Volumes.
func (w *World) SetPod(p Pod) {
	p.Volumes = slices.Clone(p.Volumes)
	sort.SliceStable(p.Volumes, func(i, j int) bool { return p.Volumes[i].Name < p.Volumes[j].Name })
	w.mu.Lock()
	old, had := w.pods[p.UID]
	w.pods[p.UID] = p
	changed := !had || !samePod(old, p)
	if changed {
		w.dropStaleErrorsLocked(p)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// DeletePod removes a pod and its recorded errors.
func (w *World) DeletePod(uid types.UID) {
	w.mu.Lock()
	_, had := w.pods[uid]
	delete(w.pods, uid)
	for k := range w.errors {
		if k.PodUID == uid {
			delete(w.errors, k)
		}
	}
	w.mu.Unlock()
	if had {
		w.onChange()
	}
}

// Pods returns a snapshot of every pod, sorted by namespace, name and UID.
// The snapshot is a copy: changing it does not change the world.
func (w *World) Pods() []Pod {
	w.mu.Lock()
	out := make([]Pod, 0, len(w.pods))
	for _, p := range w.pods {
		out = append(out, clonePod(p))
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].UID < out[j].UID
	})
	return out
}

// Pod returns a copy of one pod.
func (w *World) Pod(uid types.UID) (Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.pods[uid]
	return clonePod(p), ok
}

// clonePod copies p's volume list; the Specs stay shared (they are read-only).
func clonePod(p Pod) Pod {
	p.Volumes = slices.Clone(p.Volumes)
	return p
}

// Volume returns one volume of one pod.
func (w *World) Volume(k Key) (Volume, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.volumeLocked(k)
}
