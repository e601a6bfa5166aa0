package volume

import (
	"slices"
	"strings"
)

// MountsReadOnly reports whether a set-up mounts the volume read-only: when
// ReadOnly says so, or when its PersistentVolume's mount options do (the
// last of ro and rw wins, as with mount(8)). The plugins put ro after the
// PV's options, so ReadOnly always wins.
func (s *Spec) MountsReadOnly() bool {
	if s.ReadOnly() {
		return true
	}
	for _, o := range slices.Backward(MountOptions(s.PV)) {
		if o == "ro" || o == "rw" {
			return o == "ro"
		}
	}
	return false
}

// ReadOnlyFields names the fields that decide whether the volume is
// mounted read-only (see MountsReadOnly), for a message that tells the
// user where to look.
func (s *Spec) ReadOnlyFields() string {
	var fields []string
	switch {
	case s.Volume.NFS != nil:
		fields = append(fields, "nfs.readOnly")
	case s.Volume.PersistentVolumeClaim != nil:
		fields = append(fields, "persistentVolumeClaim.readOnly")
	}
	if s.PV != nil && s.PV.Spec.NFS != nil {
		fields = append(fields, "spec.nfs.readOnly of PersistentVolume "+s.PV.Name)
	}
	if s.PV != nil && s.PV.Spec.CSI != nil {
		fields = append(fields, "spec.csi.readOnly of PersistentVolume "+s.PV.Name)
	}
	opts := MountOptions(s.PV)
	if slices.Contains(opts, "ro") || slices.Contains(opts, "rw") {
		fields = append(fields, "the mount options of PersistentVolume "+s.PV.Name)
	}
	if len(fields) == 0 {
		return "readOnly"
	}
	return strings.Join(fields, " or ")
}
