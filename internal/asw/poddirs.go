package asw

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// PodDir is a pod directory known to exist on disk.
type PodDir struct {
	UID types.UID
	// Reconstructed is true when the directory was found at start and no
	// operation has set up a volume in it since.
	Reconstructed bool
}

// AddPodDir records a pod directory found on disk at start.
func (w *World) AddPodDir(uid types.UID, reconstructed bool) {
	w.mu.Lock()
	_, had := w.podDirs[uid]
	if !had {
		w.podDirs[uid] = podDir{reconstructed: reconstructed}
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if !had {
		w.onChange()
	}
}

// notePodDirLocked records that the directory of v's pod exists: a volume
// set up by an operation makes a directory found at start its own. It
// reports whether that changed what is known.
func (w *World) notePodDirLocked(v Volume) bool {
	dir, known := w.podDirs[v.PodUID]
	if known && (v.Reconstructed || !dir.reconstructed) {
		return false
	}
	w.podDirs[v.PodUID] = podDir{reconstructed: v.Reconstructed}
	return true
}

// RemovePodDir forgets a pod directory (it was removed).
func (w *World) RemovePodDir(uid types.UID) {
	w.mu.Lock()
	_, had := w.podDirs[uid]
	delete(w.podDirs, uid)
	if had {
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if had {
		w.onChange()
	}
}

// PodDir returns the pod directory of uid, when it is known to exist.
func (w *World) PodDir(uid types.UID) (PodDir, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.podDirs[uid]
	return PodDir{UID: uid, Reconstructed: d.reconstructed}, ok
}

// PodDirs returns the known pod directories, sorted by UID.
func (w *World) PodDirs() []PodDir {
	w.mu.Lock()
	out := make([]PodDir, 0, len(w.podDirs))
	for uid, d := range w.podDirs {
		out = append(out, PodDir{UID: uid, Reconstructed: d.reconstructed})
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}
