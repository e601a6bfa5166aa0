package status

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/subpath"
)

// Ready reports whether pod uid is ready: the Ready of Pod(uid), decided
// without building the status (no Volumes, no subPath lists, no usage, no
// since). A request waiting for a pod is woken at every change of it,
// about six per set-up; most changes cannot make it ready, and then
// nothing else is computed.
//
// It must decide exactly as compute does (a waiting runtime is never told
// "ready" by mistake, nor kept waiting when the pod is ready):
// TestReadyAgreesWithCompute checks both on every combination of the
// inputs compute reads. Callers that answer "ready" still answer with the
// computed status, whose Ready is what they send.
func (w Worlds) Ready(uid types.UID) bool {
	var r readiness
	return r.ready(w, uid)
}

// readiness holds the copies of a pod's volumes that Ready looks at: a
// waiting request keeps one (in its poll) and reuses it at each look.
type readiness struct {
	desired []dsw.Volume
	actual  []asw.Volume
}

// ready is Ready, looking at copies made in r's buffers.
func (r *readiness) ready(w Worlds, uid types.UID) bool {
	var ok bool
	r.desired, ok = w.Desired.AppendPodVolumes(r.desired[:0], uid)
	if !ok {
		return false // Terminating, Held or unknown: never ready
	}
	r.actual = w.Actual.AppendPodVolumes(r.actual[:0], uid)
	actual := r.actual
	for _, d := range r.desired {
		i, have := slices.BinarySearchFunc(actual, d.Name, func(a asw.Volume, name string) int { return strings.Compare(a.Name, name) })
		var a asw.Volume
		if have {
			a = actual[i]
		}
		if !volumeReady(d, a, have) {
			return false
		}
	}
	return true
}

// forget drops what r's buffers refer to (specs, subPath outcomes), and
// keeps their room.
func (r *readiness) forget() {
	clear(r.desired[:cap(r.desired)])
	clear(r.actual[:cap(r.actual)])
	r.desired, r.actual = r.desired[:0], r.actual[:0]
}

// volumeReady is whether a volume lets its pod be ready, as compute
// decides: a kept volume always does; any other only when volumeState
// makes it Mounted and none of its subPaths failed. volumeState's Mounted
// cases are a kept volume found set up, and a volume set up Mounted with
// the desired plugin that is neither in conflict nor unsupported (a spec
// Problem, or an operation's error, does not unmount what is set up).
func volumeReady(d dsw.Volume, a asw.Volume, have bool) bool {
	if d.Kept {
		return true
	}
	mounted := !d.Conflict && !d.Unsupported && have && a.State == asw.Mounted && (a.Plugin == d.Plugin || d.Plugin == "")
	return mounted && !subPathsFail(d.SubPaths, a.SubPaths)
}

// subPathsFail is subPathFailed(subPaths(wants, got)) without the list.
func subPathsFail(wants []subpath.Want, got *subpath.Outcome) bool {
	for _, w := range wants {
		if w.Problem != "" {
			return true
		}
		if got != nil && lastMatchError(w, got.Mounts) != "" {
			return true
		}
	}
	return false
}

// lastMatchError is the error of the last of mounts that prepared w, as
// subPaths shows it ("" when none did).
func lastMatchError(w subpath.Want, mounts []subpath.Prepared) string {
	var msg string
	for _, m := range mounts {
		if m.Container == w.Container && m.Index == w.Index && m.SubPath == w.Path {
			msg = m.Error
		}
	}
	return msg
}
