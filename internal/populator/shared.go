package populator

import (
	"cmp"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// refuseSharedDirectories decides which volumes of the pod may have a
// directory (dsw.Volume.Name) that several of them want.
//
// Volumes of one claim with the same readOnly share its PersistentVolume's
// directory, mounted once for the pod as the kubelet mounts it: the first
// without a problem is set up, and each other one gets a problem saying
// so (the status shows it at the first one's mount).
//
// Any other volumes that want one directory are all in Conflict: one claim
// read-only in one volume and writable in another, or a claim whose
// PersistentVolume is named like another volume of the pod (or two claims
// naming one PV). None of them is set up or shown with what is mounted
// there, which would hand a readOnly volume a writable mount, or a claim
// volume an emptyDir. All of them fail, not all but the first, so that the
// outcome depends neither on the order of the spec nor on what an earlier
// spec set up there: after an edit or a restart that mount stays, as every
// volume of a running pod does, and is shown for none of them.
//
// Volumes whose name the spec uses more than once are left as they are:
// they are rejected already, as which one is meant cannot be known.
func refuseSharedDirectories(d *dsw.Pod, pod *v1.Pod) {
	uses := map[string]int{}
	for _, v := range pod.Spec.Volumes {
		uses[v.Name]++
	}
	byDir := map[string][]int{}
	for i, v := range d.Volumes {
		if uses[specName(v)] < 2 {
			byDir[v.Name] = append(byDir[v.Name], i)
		}
	}
	readOnly := claimsReadOnly(pod)
	for dir, idx := range byDir {
		switch {
		case len(idx) < 2:
		case !oneClaim(d.Volumes, idx):
			refuseClash(d.Volumes, idx, dir)
		case !sameReadOnly(d.Volumes, idx, readOnly):
			refuseReadOnlyMix(d.Volumes, idx, readOnly, pod.Namespace)
		default:
			shareFirst(d.Volumes, idx)
		}
	}
}

// oneClaim reports whether the volumes idx of vols are all of one claim.
func oneClaim(vols []dsw.Volume, idx []int) bool {
	for _, i := range idx {
		if vols[i].Claim == "" || vols[i].Claim != vols[idx[0]].Claim {
			return false
		}
	}
	return true
}

// sameReadOnly reports whether the volumes idx of vols are all readOnly, or
// all not.
func sameReadOnly(vols []dsw.Volume, idx []int, readOnly map[string]bool) bool {
	for _, i := range idx {
		if readOnly[specName(vols[i])] != readOnly[specName(vols[idx[0]])] {
			return false
		}
	}
	return true
}

// refuseClash puts the volumes idx of vols, which want directory dir and
// are not all of one claim, in conflict.
func refuseClash(vols []dsw.Volume, idx []int, dir string) {
	for _, i := range idx {
		a, b := pair(vols, idx, i, func(int) bool { return true })
		v := vols[i]
		vols[i] = dsw.Volume{Name: v.Name, SpecName: v.SpecName, Claim: v.Claim, PV: v.PV, Block: v.Block, Conflict: true, Problem: fmt.Sprintf(
			"volumes %q and %q would share the directory %q, which only volumes of one claim with the same readOnly can: neither is set up", a, b, dir)}
	}
}

// refuseReadOnlyMix puts the volumes idx of vols, all of one claim and
// some of them readOnly, in conflict.
func refuseReadOnlyMix(vols []dsw.Volume, idx []int, readOnly map[string]bool, namespace string) {
	for _, i := range idx {
		a, b := pair(vols, idx, i, func(j int) bool { return readOnly[specName(vols[j])] != readOnly[specName(vols[i])] })
		ro := a
		if !readOnly[a] {
			ro = b
		}
		v := vols[i]
		vols[i] = dsw.Volume{Name: v.Name, SpecName: v.SpecName, Claim: v.Claim, PV: v.PV, Block: v.Block, Conflict: true, Problem: fmt.Sprintf(
			"volumes %q and %q both use claim %s/%s, and only %q is readOnly: its PersistentVolume %s is mounted once for the pod, "+
				"so it cannot be read-only for one volume and writable for the other; give both the same readOnly, or use one volume",
			a, b, namespace, v.Claim, ro, v.PV)}
	}
}

// pair returns the names in the spec of volume i of idx and of the first
// other volume j of idx for which other(j) holds, in the spec's order.
// There is one: the caller knows the volumes differ.
func pair(vols []dsw.Volume, idx []int, i int, other func(j int) bool) (string, string) {
	for _, j := range idx {
		if j != i && other(j) {
			return specName(vols[min(i, j)]), specName(vols[max(i, j)])
		}
	}
	return specName(vols[i]), specName(vols[i])
}

// shareFirst lets the first of the volumes idx of vols without a problem
// have their directory, and gives each other one a problem saying so.
func shareFirst(vols []dsw.Volume, idx []int) {
	owner := ""
	for _, i := range idx {
		v := vols[i]
		switch {
		case v.Problem != "": // never set up: it takes no directory
		case owner == "":
			owner = specName(v)
		default:
			vols[i] = dsw.Volume{Name: v.Name, SpecName: v.SpecName, Claim: v.Claim, PV: v.PV, Block: v.Block, Problem: fmt.Sprintf(
				"volume %q would share the directory %q with volume %q; use one volume of the pod for it", specName(v), v.Name, owner)}
		}
	}
}

// claimsReadOnly returns, by volume name, whether each persistentVolumeClaim
// volume of pod is readOnly.
func claimsReadOnly(pod *v1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if c := v.PersistentVolumeClaim; c != nil {
			out[v.Name] = c.ReadOnly
		}
	}
	return out
}

// specName is a desired volume's name in the pod's spec.
func specName(v dsw.Volume) string { return cmp.Or(v.SpecName, v.Name) }
