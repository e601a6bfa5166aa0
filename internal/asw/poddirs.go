package asw

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// PodDir is a pod directory known to exist on disk.
type PodDir struct {
	UID types.UID
	// Namespace and Name are the pod's, as the last set-up of one of its
	// volumes saw them: a pod that has left the desired state is still
	// named by them in logs and the status until its directory is gone.
	// Both are empty for a directory found on disk at start whose pod no
	// set-up has named since.
	Namespace, Name string
	// Source is the name of the source the pod came from, as recorded
	// beside its directory (package podrecord) before the directory was
	// made; "" when not known (a directory made by an older agent, or
	// whose record a power cut lost).
	Source string
	// Reconstructed is true when the directory was found at start and no
	// operation has set up a volume in it since.
	Reconstructed bool
	// Error is why the last removal of the directory failed, while it
	// stays.
	Error string
}

// podDir is what is known of a pod directory; its UID is its key.
type podDir struct {
	namespace, name, source string
	reconstructed           bool
	err                     string
}

func (d podDir) export(uid types.UID) PodDir {
	return PodDir{UID: uid, Namespace: d.namespace, Name: d.name, Source: d.source, Reconstructed: d.reconstructed, Error: d.err}
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

// NameFoundPod records the namespace, name and source of the pod of a
// directory found at start, as its record says.
func (w *World) NameFoundPod(uid types.UID, namespace, name, source string) {
	w.mu.Lock()
	d, had := w.podDirs[uid]
	if had {
		d.namespace, d.name, d.source = namespace, name, source
		w.podDirs[uid] = d
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if had {
		w.onChange()
	}
}

// NotePod records that the directory of pod uid may exist from now on, and
// the pod's namespace, name and source (recorded on disk before):
// a set-up is about to make the directory.
// A set-up that fails may leave the directories above its volume's behind,
// and only a known pod directory is removed once its pod is gone. Whether
// the directory was found at start stays as it was: only a volume set up
// in it makes it the agent's own (see Set). The error of an earlier
// removal is forgotten: the pod is wanted again.
func (w *World) NotePod(uid types.UID, namespace, name, source string) {
	w.mu.Lock()
	d, had := w.podDirs[uid]
	changed := !had || d.namespace != namespace || d.name != name || d.source != source || d.err != ""
	if changed {
		d.namespace, d.name, d.source, d.err = namespace, name, source, ""
		w.podDirs[uid] = d
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if changed {
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
	dir.reconstructed = v.Reconstructed
	w.podDirs[v.PodUID] = dir
	return true
}

// SetPodDirError records why the last removal of a pod directory failed;
// it does nothing for a directory that is not known.
func (w *World) SetPodDirError(uid types.UID, msg string) {
	w.mu.Lock()
	d, had := w.podDirs[uid]
	changed := had && d.err != msg
	if changed {
		d.err = msg
		w.podDirs[uid] = d
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
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
	return d.export(uid), ok
}

// PodDirsWhere returns the known pod directories for whose UID keep
// returns true, in no particular order: for a caller that wants a few of
// many without copying and sorting them all. keep must not call the world.
func (w *World) PodDirsWhere(keep func(types.UID) bool) []PodDir {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []PodDir
	for uid, d := range w.podDirs {
		if keep(uid) {
			out = append(out, d.export(uid))
		}
	}
	return out
}

// PodDirs returns the known pod directories, sorted by UID.
func (w *World) PodDirs() []PodDir {
	w.mu.Lock()
	out := make([]PodDir, 0, len(w.podDirs))
	for uid, d := range w.podDirs {
		out = append(out, d.export(uid))
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}
