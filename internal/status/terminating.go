package status

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
)

// A pod gone from the desired state is shown as long as the actual state
// knows its directory, which outlives its volumes: from the moment it is
// gone until its directory is removed, with the volumes still set up, so
// that a teardown that cannot finish is seen rather than hidden. Its
// namespace and name are those the actual state kept; both are empty for
// a pod found on disk at start and never seen in a source since.

// uids returns the UIDs of the pods the API shows: the desired pods, in
// the order of the desired state, then the Terminating ones by namespace,
// name and UID.
func (w Worlds) uids() []types.UID {
	uids := w.Desired.UIDs()
	for _, d := range w.gone(uids) {
		uids = append(uids, d.UID)
	}
	return uids
}

// gone returns the directories of the Terminating pods, by namespace, name
// and UID; desired are the UIDs of the desired pods.
func (w Worlds) gone(desired []types.UID) []asw.PodDir {
	wanted := make(map[types.UID]bool, len(desired))
	for _, uid := range desired {
		wanted[uid] = true
	}
	populated := w.Desired.Populated()
	out := w.Actual.PodDirsWhere(func(uid types.UID) bool { return !wanted[uid] })
	out = slices.DeleteFunc(out, func(d asw.PodDir) bool { return !terminating(d, populated) })
	slices.SortFunc(out, func(a, b asw.PodDir) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	return out
}

// terminating reports whether a pod directory whose pod is not desired is
// being torn down: any once every source has synced; before that, only
// one this run has set up a volume in (the reconciler tears nothing down
// that it found on disk at start until the sources have synced, and such a
// pod may yet turn out to be desired).
func terminating(d asw.PodDir, populated bool) bool {
	return populated || !d.Reconstructed
}

// terminatingPod computes the status of pod uid, which is not desired,
// when it is Terminating, and the keys of its volumes.
func (w Worlds) terminatingPod(uid types.UID) (Pod, []string, bool) {
	d, ok := w.Actual.PodDir(uid)
	if !ok || !terminating(d, w.Desired.Populated()) {
		return Pod{}, nil, false
	}
	actual, _ := w.Actual.PodVolumes(uid)
	out := Pod{UID: string(uid), Namespace: d.Namespace, Name: d.Name, State: Terminating, Volumes: make([]Volume, 0, len(actual))}
	keys := make([]string, len(actual))
	for i, a := range actual {
		keys[i] = a.Name
		name := cmp.Or(a.SpecName, a.Name)
		out.Volumes = append(out.Volumes, Volume{Name: name, Plugin: a.Plugin, Path: a.Path, State: Terminating, Error: a.TearDownError, PV: a.PV,
			NoSwap: noSwap(a.Swap)})
		if a.TearDownError != "" && out.Reason == "" {
			out.Reason = fmt.Sprintf("teardown of volume %q failed: %s", name, a.TearDownError)
		}
	}
	if d.Error != "" && out.Reason == "" {
		out.Reason = fmt.Sprintf("removing the pod directory failed: %s", d.Error)
	}
	return out, keys, true
}

// TerminatingPods counts the Terminating pods, and those of them whose
// teardown failed (stuck: the pod's Reason says why).
func (w Worlds) TerminatingPods() (terminating, stuck int) {
	for _, d := range w.gone(w.Desired.UIDs()) {
		if p, _, ok := w.terminatingPod(d.UID); ok {
			terminating++
			if p.Reason != "" {
				stuck++
			}
		}
	}
	return terminating, stuck
}
