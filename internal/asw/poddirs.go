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
	}
	w.mu.Unlock()
	if !had {
		w.onChange()
	}
}

// RemovePodDir forgets a pod directory (it was removed).
func (w *World) RemovePodDir(uid types.UID) {
	w.mu.Lock()
	_, had := w.podDirs[uid]
	delete(w.podDirs, uid)
	w.mu.Unlock()
	if had {
		w.onChange()
	}
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
