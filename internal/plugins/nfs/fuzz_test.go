package nfs

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/volume"
)

// FuzzValidate holds Validate to what it is for: whatever server, path and
// mount options it accepts, for an inline volume or a PersistentVolume
// (options in spec.mountOptions or in the mount-options annotation), reach
// mount(8) as they were written. The source server:path is one argument
// that cannot be read as an option and that mount.nfs and the kernel split
// back into the same server and path; the options, joined with commas as
// mount(8) gets them, split back into the same options, none of which can
// be read as a command-line flag.
// Seeds: the f.Add calls and testdata/fuzz/FuzzValidate.
func FuzzValidate(f *testing.F) {
	f.Add("nfs.example.com", "/exports/a", "hard\nnfsvers=4.1", false)
	f.Add("10.0.0.1", "/", "ro", true)
	f.Add("fd00::1", "/e", "", false)
	f.Add("[fd00::1]", "/e", "", false)
	f.Add("-oremount", "/e", "-o\nremount", false)
	f.Add("srv", "/e,remount", "a,b", true)
	f.Add("[srv]:/other", "/e", " ro , nolock ", true)
	f.Add("srv", "relative", "x y", false)
	f.Fuzz(func(t *testing.T, server, exportPath, options string, annotation bool) {
		for _, spec := range specs(server, exportPath, options, annotation) {
			if (&Plugin{}).Validate(spec) != nil {
				continue
			}
			e, _ := exportOf(spec)
			checkSource(t, e)
			checkOptions(t, volume.MountOptions(spec.PV))
		}
	})
}

// specs are an inline volume and a PersistentVolume with options.
func specs(server, exportPath, options string, annotation bool) []*volume.Spec {
	src := &v1.NFSVolumeSource{Server: server, Path: exportPath}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv"},
		Spec:       v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{NFS: src}},
	}
	if annotation {
		pv.Annotations = map[string]string{"volume.beta.kubernetes.io/mount-options": options}
	} else if options != "" {
		pv.Spec.MountOptions = strings.Split(options, "\n")
	}
	return []*volume.Spec{
		{Pod: &v1.Pod{}, Volume: &v1.Volume{Name: "v", VolumeSource: v1.VolumeSource{NFS: src}}},
		{Pod: &v1.Pod{}, Volume: &v1.Volume{Name: "v"}, PV: pv},
	}
}

func checkSource(t *testing.T, e export) {
	t.Helper()
	source := e.String()
	if strings.HasPrefix(source, "-") || strings.ContainsAny(source, " \t\n\r,\x00") {
		t.Fatalf("accepted server %q and path %q give the mount source %q", e.server, e.path, source)
	}
	host, exportPath, ok := splitSource(source)
	want := strings.TrimSuffix(strings.TrimPrefix(e.server, "["), "]")
	if !ok || host != want || exportPath != e.path {
		t.Fatalf("accepted server %q and path %q give the mount source %q, which mount.nfs reads as server %q, path %q (ok %v)",
			e.server, e.path, source, host, exportPath, ok)
	}
}

// splitSource splits a mount source as mount.nfs (nfs_parse_devname) and
// the kernel (nfs_parse_source) do: "[host]:path" for an address with
// colons, else everything up to the first colon is the host.
func splitSource(source string) (host, exportPath string, ok bool) {
	if rest, bracketed := strings.CutPrefix(source, "["); bracketed {
		host, after, found := strings.Cut(rest, "]")
		if !found || !strings.HasPrefix(after, ":") {
			return "", "", false
		}
		return host, after[1:], true
	}
	host, exportPath, ok = strings.Cut(source, ":")
	return host, exportPath, ok
}

func checkOptions(t *testing.T, opts []string) {
	t.Helper()
	for _, o := range opts {
		if o == "" || strings.HasPrefix(o, "-") || strings.ContainsAny(o, " \t\n\r\x00") {
			t.Fatalf("accepted mount option %q", o)
		}
	}
	if joined := strings.Join(opts, ","); len(opts) > 0 && strings.Join(strings.Split(joined, ","), "\n") != strings.Join(opts, "\n") {
		t.Fatalf("accepted mount options %q, which mount(8) reads as %q", opts, strings.Split(joined, ","))
	}
}
