package plugins_test

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/plugins/configmap"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/projected"
	"github.com/volume-agent/volume-agent/internal/plugins/secret"
)

func TestFindSupported(t *testing.T) {
	reg := plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"})
	for want, src := range map[string]v1.VolumeSource{
		emptydir.Name:    {EmptyDir: &v1.EmptyDirVolumeSource{}},
		hostpath.Name:    {HostPath: &v1.HostPathVolumeSource{Path: "/data"}},
		configmap.Name:   {ConfigMap: &v1.ConfigMapVolumeSource{}},
		secret.Name:      {Secret: &v1.SecretVolumeSource{}},
		downwardapi.Name: {DownwardAPI: &v1.DownwardAPIVolumeSource{}},
		projected.Name:   {Projected: &v1.ProjectedVolumeSource{}},
	} {
		p, err := reg.Find(&v1.Volume{Name: "v", VolumeSource: src})
		if err != nil || p.Name() != want {
			t.Errorf("Find(%s volume) = %v, %v; want plugin %s", want, p, err, want)
			continue
		}
		if got, ok := reg.Get(want); !ok || got != p {
			t.Errorf("Get(%s) = %v, %v; want the plugin Find returned", want, got, ok)
		}
	}
}

func TestFindUnsupported(t *testing.T) {
	reg := plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"})
	for _, tc := range []struct {
		src  v1.VolumeSource
		want string // UnsupportedError.Type
	}{
		{v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "x"}}, "csi"},
		{v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}, "ephemeral"},
		{v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}, "persistentVolumeClaim"},
		{v1.VolumeSource{CephFS: &v1.CephFSVolumeSource{}}, "cephfs"},
		{v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{}}, "iscsi"},
		{v1.VolumeSource{Image: &v1.ImageVolumeSource{}}, "image"},
		{v1.VolumeSource{}, ""},
	} {
		p, err := reg.Find(&v1.Volume{Name: "v", VolumeSource: tc.src})
		var unsupported *plugins.UnsupportedError
		if !errors.As(err, &unsupported) || unsupported.Type != tc.want || p != nil {
			t.Errorf("Find(%q volume) = %v, %v; want *UnsupportedError{Type: %q}", tc.want, p, err, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not name the type %q", err, tc.want)
		}
	}
}

func TestFindPV(t *testing.T) {
	reg := plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"})
	for _, tc := range []struct {
		src     v1.PersistentVolumeSource
		plugin  string
		wantErr string
	}{
		{src: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/disk"}}, plugin: "kubernetes.io/local-volume"},
		{src: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}, plugin: "kubernetes.io/nfs"},
		{src: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "x"}}, wantErr: "PersistentVolume pv-1: csi volumes are not supported"},
		{src: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "local.volume-agent.io", VolumeHandle: "v"}}, plugin: "kubernetes.io/csi"},
		// The driver name is compared exactly.
		{src: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "Local.volume-agent.io"}}, wantErr: "PersistentVolume pv-1: csi volumes are not supported"},
		{src: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "volume-agent.io/local"}}, wantErr: "PersistentVolume pv-1: csi volumes are not supported"},
		{src: v1.PersistentVolumeSource{}, wantErr: "PersistentVolume pv-1 sets no volume source"},
		{src: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{}, NFS: &v1.NFSVolumeSource{}}, wantErr: "several volume sources (nfs, local)"},
	} {
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: tc.src}}
		p, err := reg.FindPV(pv)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("FindPV = %v, %v; want error %q", p, err, tc.wantErr)
			}
		case err != nil || p.Name() != tc.plugin:
			t.Errorf("FindPV = %v, %v; want plugin %s", p, err, tc.plugin)
		}
	}
}

func TestFindRejectsSeveralSources(t *testing.T) {
	reg := plugins.Default(plugins.Config{Mounter: &mount.Fake{}, NodeName: "node-1"})
	for name, src := range map[string]v1.VolumeSource{
		"two supported":          {EmptyDir: &v1.EmptyDirVolumeSource{}, HostPath: &v1.HostPathVolumeSource{Path: "/data"}},
		"two unsupported":        {NFS: &v1.NFSVolumeSource{}, CSI: &v1.CSIVolumeSource{}},
		"supported, unsupported": {EmptyDir: &v1.EmptyDirVolumeSource{}, NFS: &v1.NFSVolumeSource{}},
		"unsupported, supported": {PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}, Secret: &v1.SecretVolumeSource{}},
	} {
		p, err := reg.Find(&v1.Volume{Name: "v", VolumeSource: src})
		var unsupported *plugins.UnsupportedError
		if err == nil || errors.As(err, &unsupported) || p != nil {
			t.Errorf("%s: Find = %v, %v; want an error that is not *UnsupportedError", name, p, err)
		}
	}
}

func TestNewRegistryRejectsDuplicateNames(t *testing.T) {
	if _, err := plugins.NewRegistry(&hostpath.Plugin{}, &hostpath.Plugin{}); err == nil {
		t.Fatal("NewRegistry accepted two plugins with one name")
	}
}
