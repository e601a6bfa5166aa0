package dsw

// SetError records the last operation error of a volume; an empty message
// clears it. Errors of volumes that are no longer desired are dropped.
func (w *World) SetError(k Key, msg string) {
	w.mu.Lock()
	changed := false
	if _, desired := w.volumeLocked(k); desired && w.errors[k] != msg {
		changed = true
		if msg == "" {
			delete(w.errors, k)
		} else {
			w.errors[k] = msg
		}
	}
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// Error returns the last operation error recorded for a volume.
func (w *World) Error(k Key) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errors[k]
}

// MarkPopulated records that every source has delivered its complete state
// at least once since start. Until then nothing found on disk is torn down.
func (w *World) MarkPopulated() {
	w.mu.Lock()
	changed := !w.populated
	w.populated = true
	w.mu.Unlock()
	if changed {
		w.onChange()
	}
}

// Populated reports whether MarkPopulated was called.
func (w *World) Populated() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.populated
}

func (w *World) volumeLocked(k Key) (Volume, bool) {
	for _, v := range w.pods[k.PodUID].Volumes {
		if v.Name == k.Volume {
			return v, true
		}
	}
	return Volume{}, false
}

// dropStaleErrorsLocked forgets errors of volumes p no longer has.
func (w *World) dropStaleErrorsLocked(p Pod) {
	for k := range w.errors {
		if k.PodUID != p.UID {
			continue
		}
		if _, ok := w.volumeLocked(k); !ok {
			delete(w.errors, k)
		}
	}
}

func samePod(a, b Pod) bool {
	if a.Namespace != b.Namespace || a.Name != b.Name || a.Source != b.Source || len(a.Volumes) != len(b.Volumes) {
		return false
	}
	for i := range a.Volumes {
		x, y := a.Volumes[i], b.Volumes[i]
		if x.Name != y.Name || x.Plugin != y.Plugin || x.Version != y.Version || x.Problem != y.Problem || x.Unsupported != y.Unsupported || x.Kept != y.Kept || x.SpecName != y.SpecName || x.Claim != y.Claim || x.PV != y.PV || x.Waiting != y.Waiting {
			return false
		}
	}
	return true
}
