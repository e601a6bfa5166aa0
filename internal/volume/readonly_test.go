package volume

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func claimSpec(readOnly bool, pv *v1.PersistentVolume) *Spec {
	return &Spec{Volume: &v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: readOnly}}}, PV: pv}
}

func localPV(opts ...string) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: v1.PersistentVolumeSpec{MountOptions: opts,
		PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/a"}}}}
}

func nfsPV(readOnly bool) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/", ReadOnly: readOnly}}}}
}

func csiPV(readOnly bool) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-csi"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "local.volume-agent.io", VolumeHandle: "v", ReadOnly: readOnly}}}}
}

func TestMountsReadOnly(t *testing.T) {
	legacy := localPV("rw")
	legacy.Annotations = map[string]string{"volume.beta.kubernetes.io/mount-options": "noatime, ro"}
	for _, tc := range []struct {
		name       string
		spec       *Spec
		readOnly   bool
		fields     string
		mountsRead bool
	}{
		{"claim", claimSpec(false, localPV()), false, "persistentVolumeClaim.readOnly", false},
		{"readOnly claim", claimSpec(true, localPV()), true, "persistentVolumeClaim.readOnly", true},
		{"PV mount option ro", claimSpec(false, localPV("noatime", "ro")), false,
			"persistentVolumeClaim.readOnly or the mount options of PersistentVolume pv-a", true},
		{"PV mount options, the last wins", claimSpec(false, localPV("ro", "rw")), false,
			"persistentVolumeClaim.readOnly or the mount options of PersistentVolume pv-a", false},
		{"readOnly claim wins over the PV's rw", claimSpec(true, localPV("rw")), true,
			"persistentVolumeClaim.readOnly or the mount options of PersistentVolume pv-a", true},
		{"legacy annotation wins", claimSpec(false, legacy), false,
			"persistentVolumeClaim.readOnly or the mount options of PersistentVolume pv-a", true},
		{"readOnly NFS PV", claimSpec(false, nfsPV(true)), true, "persistentVolumeClaim.readOnly or spec.nfs.readOnly of PersistentVolume pv-nfs", true},
		{"NFS PV", claimSpec(false, nfsPV(false)), false, "persistentVolumeClaim.readOnly or spec.nfs.readOnly of PersistentVolume pv-nfs", false},
		{"readOnly CSI PV", claimSpec(false, csiPV(true)), true, "persistentVolumeClaim.readOnly or spec.csi.readOnly of PersistentVolume pv-csi", true},
		{"CSI PV", claimSpec(false, csiPV(false)), false, "persistentVolumeClaim.readOnly or spec.csi.readOnly of PersistentVolume pv-csi", false},
		{"inline NFS", &Spec{Volume: &v1.Volume{Name: "share", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{ReadOnly: true}}}}, true, "nfs.readOnly", true},
		{"emptyDir", &Spec{Volume: &v1.Volume{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}, false, "readOnly", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.spec.ReadOnly(); got != tc.readOnly {
				t.Errorf("ReadOnly = %v, want %v", got, tc.readOnly)
			}
			if got := tc.spec.MountsReadOnly(); got != tc.mountsRead {
				t.Errorf("MountsReadOnly = %v, want %v", got, tc.mountsRead)
			}
			if got := tc.spec.ReadOnlyFields(); got != tc.fields {
				t.Errorf("ReadOnlyFields = %q, want %q", got, tc.fields)
			}
		})
	}
}
