package nfssubdir

import (
	"fmt"
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
)

// target is the subdirectory a PV to delete records.
type target struct {
	export  export
	rel     string
	archive bool
	options []string
}

// parseTarget reads what pv records of its subdirectory, and accepts it
// only when every record agrees: provisioned by this provisioner, an
// export and a subdirectory inside it, an nfs source pointing exactly
// there, archive-on-delete "true" or "false", mount options mount(8)
// cannot misread. A PV edited or forged to point anywhere else fails here.
func parseTarget(pv *v1.PersistentVolume) (target, error) {
	ann := pv.Annotations
	if by := ann[provisioner.AnnProvisionedBy]; by != provisioner.NFSSubdirName {
		return target{}, fmt.Errorf("annotation %s is %q, not %s", provisioner.AnnProvisionedBy, by, provisioner.NFSSubdirName)
	}
	e, err := parseExport(ann[AnnExport])
	if err != nil {
		return target{}, fmt.Errorf("annotation %s: %w", AnnExport, err)
	}
	t := target{export: e, rel: ann[AnnSubdir], options: pv.Spec.MountOptions}
	if err := storagedir.ValidRel(t.rel); err != nil {
		return target{}, fmt.Errorf("annotation %s: %w", AnnSubdir, err)
	}
	src := pv.Spec.NFS
	if src == nil {
		return target{}, fmt.Errorf("spec.nfs is not set")
	}
	if want := path.Join(e.path, t.rel); src.Server != e.server || src.Path != want {
		return target{}, fmt.Errorf("spec.nfs %s:%s is not %s:%s, the subdirectory its annotations record", src.Server, src.Path, e.server, want)
	}
	switch ann[provisioner.AnnArchiveOnDelete] {
	case "true":
		t.archive = true
	case "false":
	default:
		return target{}, fmt.Errorf("annotation %s is %q, not \"true\" or \"false\"", provisioner.AnnArchiveOnDelete, ann[provisioner.AnnArchiveOnDelete])
	}
	if err := checkOptions(t.options); err != nil {
		return target{}, fmt.Errorf("spec.mountOptions: %w", err)
	}
	return t, nil
}

// maxArchiveName bounds the name archiveName gives, below the 255 bytes of
// a directory entry, with room for ArchiveInto's "archived-" and "-<n>".
const maxArchiveName = 200

// archiveName is the name pv's subdirectory is archived under (in
// storagedir.ArchiveDir, as archived-<name>): <namespace>-<claim>-<PV
// name>, as the upstream provisioner names a claim's directory, so that an
// archive says whose volume it was whatever path the pattern gave it; the
// PV name alone when pv names no claim or the name would be too long. The
// PV name, unique, keeps two archives apart.
func archiveName(pv *v1.PersistentVolume) string {
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace == "" || ref.Name == "" || strings.Contains(ref.Namespace+ref.Name, "/") {
		return pv.Name
	}
	name := ref.Namespace + "-" + ref.Name + "-" + pv.Name
	if len(name) > maxArchiveName || storagedir.ValidRel(name) != nil {
		return pv.Name
	}
	return name
}
