package populator

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// Actual tells which volumes are set up, or were found on disk at start.
type Actual interface {
	// PodVolumes returns the volumes of one pod and their Generation.
	PodVolumes(uid types.UID) ([]asw.Volume, uint64)
	// Generation changes whenever a volume of the pod is added or removed
	// or changes plugin, mode or access.
	Generation(uid types.UID) uint64
}

// keepSetUpVolumes protects the volumes of a running pod from changes to
// its spec. In Kubernetes a pod's volumes cannot change; a manifest can be
// edited — or read half-written. A volume that is set up (or was found on
// disk at start) and is missing from the spec, or whose spec now names
// another plugin, another volumeMode, or readOnly where it was mounted
// writable (or the reverse), stays as it is, with a problem saying why,
// until the pod goes; so does a claim's volume whose claim is being
// deleted (removed from the manifests while the pod runs), shown as the
// pod's volume, with its usage. Tearing a volume down would delete an
// emptyDir's data on an edit or a partial write, and a remount under
// running containers would change what they already hold. The decision rests on the actual
// state only, which is rebuilt from disk after a restart (whether a mount
// is read-only, from the kernel's mount table), so it survives one.
func keepSetUpVolumes(d *dsw.Pod, setUp map[string]asw.Volume) {
	present := map[string]bool{}
	for i, v := range d.Volumes {
		present[v.Name] = true
		a, ok := setUp[v.Name]
		switch {
		case ok && v.Deleting && (a.State == asw.Mounted || a.Access != asw.AccessUnknown):
			// Mounted, or found mounted at start: kept, as the pod's
			// containers still use it; the claim's storage is released
			// once the pod ends. A directory found without its mount
			// (after a reboot) is not shown as set up; it stays as it is
			// all the same (Problem: never set up).
			d.Volumes[i].Kept = true
			d.Volumes[i].Problem = fmt.Sprintf("%s; the volume stays set up as it is while this pod runs, and is released when the pod ends", v.Problem)
		case ok && v.Plugin != "" && v.Plugin != a.Plugin:
			d.Volumes[i] = dsw.Volume{Name: v.Name, Problem: fmt.Sprintf(
				"volume %q of a running pod changed from %s to %s: a pod's volumes cannot change; the %s volume is kept until the pod is deleted",
				v.Name, a.Plugin, v.Plugin, a.Plugin)}
		case ok && v.Plugin != "" && v.Block != a.Block:
			d.Volumes[i] = dsw.Volume{Name: v.Name, Block: a.Block, Problem: fmt.Sprintf(
				"volume %q of a running pod changed from volumeMode %s to %s: a pod's volumes cannot change; the %s volume is kept until the pod is deleted",
				v.Name, modeName(a.Block), modeName(v.Block), modeName(a.Block))}
		case ok && v.Plugin != "" && a.ReadOnlyChanged(v.ReadOnly):
			from, to := accessNames(v.ReadOnly)
			d.Volumes[i] = dsw.Volume{Name: v.Name, SpecName: v.SpecName, Claim: v.Claim, PV: v.PV, Problem: fmt.Sprintf(
				"volume %q of running pod %s/%s changed from %s to %s (%s): a pod's volumes cannot change; "+
					"the %s mount is kept until the pod is deleted; delete the pod and create it again to have it mounted %s",
				specName(v), d.Namespace, d.Name, from, to, v.Spec.ReadOnlyFields(), from, to)}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(setUp)) {
		if present[name] {
			continue
		}
		d.Volumes = append(d.Volumes, dsw.Volume{Name: name, Kept: true, Problem: fmt.Sprintf(
			"volume %q is set up but not in the pod's spec: a pod's volumes cannot change; it is kept until the pod is deleted", name)})
	}
}

// accessNames names the access a volume was set up with, and the one its
// spec now asks for, readOnly or not.
func accessNames(readOnly bool) (string, string) {
	if readOnly {
		return "read-write", "readOnly"
	}
	return "readOnly", "read-write"
}

// modeName is the volumeMode of a volume that is a device (block) or not.
func modeName(block bool) string {
	if block {
		return "Block"
	}
	return "Filesystem"
}
