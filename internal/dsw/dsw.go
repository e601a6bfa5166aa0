// Package dsw holds the desired state of the world: for every pod that should
// run on this node, every volume it needs, the plugin that handles it and the
// version of the content it should have.
//
// The populator is the only writer of pods; the operation executor records
// the last error of each volume here so the status API can show it. The
// world performs no I/O and never decides what to do: the reconciler does.
package dsw

import (
	"cmp"
	"slices"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/subpath"
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
	// Block marks a claim's volume whose PersistentVolume has volumeMode
	// Block: its device is published for the pod's volumeDevices
	// (volume.BlockMapper), not mounted on a directory.
	Block bool
	// ReadOnly: a set-up mounts the volume read-only
	// (volume.Spec.MountsReadOnly).
	ReadOnly bool
	// Spec is what the plugin needs for SetUp. Read-only.
	Spec *volume.Spec
	// Version changes whenever SetUp would produce different content.
	Version string
	// Problem, when set, is a permanent problem with the spec (invalid or
	// unsupported): the volume is not attempted until the spec changes.
	Problem string
	// Unsupported marks a Problem caused by a volume type the agent lacks.
	Unsupported bool
	// Conflict marks a volume that may not have the directory Name names,
	// which another volume of the pod wants too (one claim read-only in one
	// volume and not in the other, or a claim whose PersistentVolume is
	// named like another volume), with a Problem saying why. It is never
	// set up, and never shown with what is set up in that directory.
	Conflict bool
	// Kept marks a volume that is set up (or was found on disk) and stays
	// as it is until the pod goes, with a Problem saying why: it is not in
	// the pod's spec (it does not count for the pod's readiness then), or
	// its claim is being deleted (Deleting).
	Kept bool
	// Deleting marks a claim's volume whose claim is being deleted while
	// the pod runs (removed from the manifests, or held by pvc-protection),
	// with a Problem saying so: it is never set up anew; set up, it is Kept.
	Deleting bool
	// Waiting, when set, says which input of the content is not known yet
	// (a watch that has not listed): the volume is not set up or refreshed
	// until it is, and this is not a failure.
	Waiting string
	// SubPaths are the subPath mounts the pod's containers want of the
	// volume, prepared once it is set up.
	SubPaths []subpath.Want
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
	changes  Watchers

	mu        sync.Mutex
	pods      map[types.UID]*entry // guarded by mu
	populated bool                 // guarded by mu
	// removed holds the pods, not desired, whose removal counts (see
	// removal.go), and held, by pod, why the removal of a pod found on disk
	// does not count yet.
	removed map[types.UID]bool   // guarded by mu
	held    map[types.UID]string // guarded by mu
}

// entry is one desired pod and what operations last said about its volumes.
type entry struct {
	pod Pod
	// errors holds the last operation error per volume name; nil when
	// there is none.
	errors map[string]string
}

// New returns an empty world; onChange (may be nil) is called after every
// change, outside the lock.
func New(onChange func()) *World {
	if onChange == nil {
		onChange = func() {}
	}
	return &World{onChange: onChange, pods: map[types.UID]*entry{}, removed: map[types.UID]bool{}, held: map[types.UID]string{}}
}

// Watch returns a set fed with the UID of every pod that changes from now
// on (added, replaced with a difference, deleted, an error recorded), for a
// consumer that looks again at changed pods only.
func (w *World) Watch() *Changes { return w.changes.Watch() }

// SetPod adds or replaces a pod. Replacing a pod with one that differs only
// in its Spec pointers stores the new specs without signalling a change.
// The world keeps its own copy of p.Volumes. A pod that is desired is not
// removed: whatever was known of its removal is forgotten.
func (w *World) SetPod(p Pod) {
	p.Volumes = slices.Clone(p.Volumes)
	sort.SliceStable(p.Volumes, func(i, j int) bool { return p.Volumes[i].Name < p.Volumes[j].Name })
	w.mu.Lock()
	e, had := w.pods[p.UID]
	forgot := w.forgetRemovalLocked(p.UID)
	changed := !had || !samePod(e.pod, p) || forgot
	if !had {
		e = &entry{}
		w.pods[p.UID] = e
	}
	e.pod = p
	if changed {
		e.dropStaleErrors()
		w.changes.Add(p.UID)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// DeletePod removes a pod and its recorded errors, because its source
// observed its removal: its volumes may be torn down (Removed).
func (w *World) DeletePod(uid types.UID) {
	w.mu.Lock()
	_, had := w.pods[uid]
	delete(w.pods, uid)
	if had {
		w.removed[uid] = true
		delete(w.held, uid)
		w.changes.Add(uid)
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
	for _, e := range w.pods {
		out = append(out, clonePod(e.pod))
	}
	w.mu.Unlock()
	SortPods(out)
	return out
}

// SortPods sorts pods by namespace, name and UID, the order of Pods.
func SortPods(pods []Pod) { slices.SortFunc(pods, comparePods) }

func comparePods(a, b Pod) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
}

// UIDs returns the UID of every pod, in the order of Pods, without copying
// the pods.
func (w *World) UIDs() []types.UID {
	w.mu.Lock()
	ids := make([]Pod, 0, len(w.pods))
	for _, e := range w.pods {
		ids = append(ids, Pod{UID: e.pod.UID, Namespace: e.pod.Namespace, Name: e.pod.Name})
	}
	w.mu.Unlock()
	SortPods(ids)
	out := make([]types.UID, len(ids))
	for i, p := range ids {
		out[i] = p.UID
	}
	return out
}

// Pod returns a copy of one pod.
func (w *World) Pod(uid types.UID) (Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.pods[uid]
	if !ok {
		return Pod{}, false
	}
	return clonePod(e.pod), true
}

// AppendPodVolumes appends the volumes of pod uid to dst, sorted by name
// (copies, as Pod's), and reports whether the pod is desired: Pod's
// volumes into a buffer of the caller's, for a caller that looks often
// (a request waiting for the pod looks at each of its changes).
func (w *World) AppendPodVolumes(dst []Volume, uid types.UID) ([]Volume, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.pods[uid]
	if !ok {
		return dst, false
	}
	return append(dst, e.pod.Volumes...), true
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
