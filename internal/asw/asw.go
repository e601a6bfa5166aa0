// Package asw holds the actual state of the world: which volumes are set up
// for which pod, in which state, with which content version, and which pod
// directories exist on disk.
//
// Only the operation executor (after an operation) and reconstruction (at
// start) write it. The world performs no I/O.
package asw

import (
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/dsw"
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
	// Reconstructed is true for a volume found on disk at start that no
	// operation has touched since.
	Reconstructed bool
}

// Key returns the volume's key.
func (v Volume) Key() dsw.Key { return dsw.Key{PodUID: v.PodUID, Volume: v.Name} }

// World is the actual state. Its methods are safe for concurrent use.
type World struct {
	onChange func()

	mu      sync.Mutex
	volumes map[dsw.Key]Volume   // guarded by mu
	podDirs map[types.UID]podDir // guarded by mu
}

type podDir struct{ reconstructed bool }

// New returns an empty world; onChange (may be nil) is called after every
// change, outside the lock.
func New(onChange func()) *World {
	if onChange == nil {
		onChange = func() {}
	}
	return &World{onChange: onChange, volumes: map[dsw.Key]Volume{}, podDirs: map[types.UID]podDir{}}
}

// Set records v, replacing what was known about its key; the pod's
// directory is recorded as existing.
func (w *World) Set(v Volume) {
	w.mu.Lock()
	old, had := w.volumes[v.Key()]
	w.volumes[v.Key()] = v
	if _, ok := w.podDirs[v.PodUID]; !ok || !v.Reconstructed {
		w.podDirs[v.PodUID] = podDir{reconstructed: v.Reconstructed}
	}
	w.mu.Unlock()
	if !had || old != v {
		w.onChange()
	}
}

// Delete forgets a volume (it was torn down). The pod directory stays known.
func (w *World) Delete(k dsw.Key) {
	w.mu.Lock()
	_, had := w.volumes[k]
	delete(w.volumes, k)
	w.mu.Unlock()
	if had {
		w.onChange()
	}
}

// Get returns one volume.
func (w *World) Get(k dsw.Key) (Volume, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.volumes[k]
	return v, ok
}

// Volumes returns a snapshot of every volume, sorted by pod and name.
func (w *World) Volumes() []Volume {
	w.mu.Lock()
	out := make([]Volume, 0, len(w.volumes))
	for _, v := range w.volumes {
		out = append(out, v)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].PodUID != out[j].PodUID {
			return out[i].PodUID < out[j].PodUID
		}
		return out[i].Name < out[j].Name
	})
	return out
}
