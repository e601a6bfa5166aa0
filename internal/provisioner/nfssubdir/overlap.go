package nfssubdir

import (
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// overlapping returns the PV of pvs, other than the one named self, whose
// nfs source exposes the directory rel of export e or nests with it: the
// same server (in any case) and a path that is that directory, one above
// it or one below it. Only paths strictly below the export's count: a PV
// of the whole export, or of a directory above it, exposes every volume of
// the export by design (a backup job's, say), and counting it would make
// the class unusable. Paths are compared as written, cleaned; a server
// written two ways (a name and its address) is two servers here. When
// several overlap, the one whose name sorts first is returned, so that a
// retry says the same.
func overlapping(pvs []*v1.PersistentVolume, self string, e export, rel string) *v1.PersistentVolume {
	dir := path.Join(e.path, rel)
	var found *v1.PersistentVolume
	for _, pv := range pvs {
		src := pv.Spec.NFS
		if pv.Name == self || src == nil || !strings.EqualFold(src.Server, e.server) || !path.IsAbs(src.Path) {
			continue
		}
		other := path.Clean(src.Path)
		if below(other, e.path) && (other == dir || below(other, dir) || below(dir, other)) {
			if found == nil || pv.Name < found.Name {
				found = pv
			}
		}
	}
	return found
}

// isOwn reports whether pvs lists the PV named self with an nfs source
// that is exactly the directory rel of export e: a Provision that runs
// again for a claim whose PV exists already (its informer lagging) finds
// the volume it made, whatever the pods wrote in it since.
func isOwn(pvs []*v1.PersistentVolume, self string, e export, rel string) bool {
	for _, pv := range pvs {
		src := pv.Spec.NFS
		if pv.Name == self && src != nil && strings.EqualFold(src.Server, e.server) && path.Clean(src.Path) == path.Join(e.path, rel) {
			return true
		}
	}
	return false
}

// below reports whether p is strictly below dir; both are absolute and
// clean.
func below(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}

// existing is the PVs req lists, none when it lists none.
func existing(req provisioner.Request) []*v1.PersistentVolume {
	if req.PVs == nil {
		return nil
	}
	return req.PVs()
}
