package dsw

import "slices"

// SetError records the last operation error of a volume; an empty message
// clears it. Errors of volumes that are no longer desired are dropped.
func (w *World) SetError(k Key, msg string) {
	w.mu.Lock()
	e, changed := w.pods[k.PodUID], false
	if _, desired := w.volumeLocked(k); desired && e.errors[k.Volume] != msg {
		changed = true
		e.setError(k.Volume, msg)
		w.changes.Add(k.PodUID)
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
	if e, ok := w.pods[k.PodUID]; ok {
		return e.errors[k.Volume]
	}
	return ""
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
	e, ok := w.pods[k.PodUID]
	if !ok {
		return Volume{}, false
	}
	for _, v := range e.pod.Volumes {
		if v.Name == k.Volume {
			return v, true
		}
	}
	return Volume{}, false
}

func (e *entry) setError(volume, msg string) {
	switch {
	case msg != "" && e.errors == nil:
		e.errors = map[string]string{volume: msg}
	case msg != "":
		e.errors[volume] = msg
	default:
		delete(e.errors, volume)
	}
}

// dropStaleErrors forgets errors of volumes the pod no longer has.
func (e *entry) dropStaleErrors() {
	for name := range e.errors {
		if !slices.ContainsFunc(e.pod.Volumes, func(v Volume) bool { return v.Name == name }) {
			delete(e.errors, name)
		}
	}
}

func samePod(a, b Pod) bool {
	if a.Namespace != b.Namespace || a.Name != b.Name || a.Source != b.Source || len(a.Volumes) != len(b.Volumes) {
		return false
	}
	for i := range a.Volumes {
		if !a.Volumes[i].Equal(b.Volumes[i]) {
			return false
		}
	}
	return true
}

// Equal reports whether v and o differ in nothing but their Spec pointers:
// whether the desired state would signal a change from one to the other.
func (v Volume) Equal(o Volume) bool {
	return v.Name == o.Name && v.Plugin == o.Plugin && v.Version == o.Version && v.Problem == o.Problem &&
		v.Unsupported == o.Unsupported && v.Kept == o.Kept && v.Deleting == o.Deleting && v.Conflict == o.Conflict && v.SpecName == o.SpecName && v.Claim == o.Claim &&
		v.PV == o.PV && v.Waiting == o.Waiting && v.Block == o.Block && v.ReadOnly == o.ReadOnly && slices.Equal(v.SubPaths, o.SubPaths)
}
