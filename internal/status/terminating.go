package status

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
)

// A pod gone from the desired state is shown as long as the actual state
// knows its directory, which outlives its volumes: from the moment its
// removal counts until its directory is removed, with the volumes still set
// up, so that a teardown that cannot finish is seen rather than hidden
// (Terminating). A pod found on disk at start that no source lists, and
// whose removal does not count yet, is shown Held, with the reason. Its
// namespace and name are those the actual state kept (from the pod's
// record for one found on disk); both are empty for a directory without a
// record.

// uids returns the UIDs of the pods the API shows: the desired pods, in
// the order of the desired state, then the Terminating and Held ones by
// namespace, name and UID.
func (w Worlds) uids() []types.UID {
	uids := w.Desired.UIDs()
	for _, d := range w.gone(uids) {
		uids = append(uids, d.UID)
	}
	return uids
}

// gone returns the directories of the Terminating and Held pods, by
// namespace, name and UID; desired are the UIDs of the desired pods.
func (w Worlds) gone(desired []types.UID) []asw.PodDir {
	wanted := make(map[types.UID]bool, len(desired))
	for _, uid := range desired {
		wanted[uid] = true
	}
	out := w.Actual.PodDirsWhere(func(uid types.UID) bool { return !wanted[uid] })
	out = slices.DeleteFunc(out, func(d asw.PodDir) bool { return goneState(w, d.UID) == "" })
	slices.SortFunc(out, func(a, b asw.PodDir) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	return out
}

// goneState is the state of pod uid, which is not desired: Terminating once
// its removal counts, Held while it is held, with the reason, or "" (not
// shown: nothing is known yet, before every source has synced).
func goneState(w Worlds, uid types.UID) (state string) {
	if w.Desired.Removed(uid) {
		return Terminating
	}
	if _, held := w.Desired.Held(uid); held {
		return Held
	}
	return ""
}

// terminatingPod computes the status of pod uid, which is not desired,
// when it is Terminating or Held, and the keys of its volumes.
func (w Worlds) terminatingPod(uid types.UID) (Pod, []string, bool) {
	d, ok := w.Actual.PodDir(uid)
	state := goneState(w, uid)
	if !ok || state == "" {
		return Pod{}, nil, false
	}
	actual, _ := w.Actual.PodVolumes(uid)
	out := Pod{UID: string(uid), Namespace: d.Namespace, Name: d.Name, State: state, Volumes: make([]Volume, 0, len(actual))}
	if why, held := w.Desired.Held(uid); held && state == Held {
		out.Reason = "found on disk at start and not in its source; kept as it is, because its removal does not count yet: " + why
	}
	keys := make([]string, len(actual))
	for i, a := range actual {
		keys[i] = a.Name
		name := cmp.Or(a.SpecName, a.Name)
		out.Volumes = append(out.Volumes, Volume{Name: name, Plugin: a.Plugin, Path: a.Path, State: state, Error: a.TearDownError, PV: a.PV,
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
		if p, _, ok := w.terminatingPod(d.UID); ok && p.State == Terminating {
			terminating++
			if p.Reason != "" {
				stuck++
			}
		}
	}
	return terminating, stuck
}
