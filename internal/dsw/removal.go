package dsw

import "k8s.io/apimachinery/pkg/types"

// The removal of a pod that is not desired. A pod's volumes are torn down
// only once its removal counts (package evidence): DeletePod says so for a
// pod its source listed and then no longer lists; MarkRemoved for a pod
// found on disk at start that its source does not list, once the source's
// evidence holds; Hold records, until then, why not. Not being desired is
// not enough: a pod found on disk that no source lists yet is not known
// to be gone.

// MarkRemoved records that the removal of pod uid, which is not desired,
// counts. It does nothing for a desired pod.
func (w *World) MarkRemoved(uid types.UID) {
	w.mu.Lock()
	_, desired := w.pods[uid]
	changed := !desired && !w.removed[uid]
	if changed {
		w.removed[uid] = true
		delete(w.held, uid)
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// Hold records why the removal of pod uid, found on disk and not desired,
// does not count yet. It does nothing for a desired or removed pod.
func (w *World) Hold(uid types.UID, why string) {
	w.mu.Lock()
	_, desired := w.pods[uid]
	changed := !desired && !w.removed[uid] && w.held[uid] != why
	if changed {
		w.held[uid] = why
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// Forget drops what is known of the removal of pod uid, whose directory is
// gone.
func (w *World) Forget(uid types.UID) {
	w.mu.Lock()
	changed := w.forgetRemovalLocked(uid)
	if changed {
		w.changes.Add(uid)
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// Removed reports whether the removal of pod uid counts: its volumes and
// directory may go.
func (w *World) Removed(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.removed[uid]
}

// Held returns why the removal of pod uid, found on disk, does not count
// yet, when it is held.
func (w *World) Held(uid types.UID) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	why, ok := w.held[uid]
	return why, ok
}

// Undecided reports whether nothing is known of the removal of pod uid:
// neither removed nor held.
func (w *World) Undecided(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, held := w.held[uid]
	return !w.removed[uid] && !held
}

func (w *World) forgetRemovalLocked(uid types.UID) bool {
	_, held := w.held[uid]
	had := held || w.removed[uid]
	delete(w.removed, uid)
	delete(w.held, uid)
	return had
}

// RemovedPods returns the pods whose removal counts.
func (w *World) RemovedPods() map[types.UID]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[types.UID]bool, len(w.removed))
	for uid := range w.removed {
		out[uid] = true
	}
	return out
}
