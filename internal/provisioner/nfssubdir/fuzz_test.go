package nfssubdir

import (
	"path"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/nfs"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagedir"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// FuzzPathPattern expands arbitrary pathPatterns for claims with arbitrary
// namespaces, names, labels and annotations. A path it gives must stay
// strictly inside the export (relative, clean, no ".." component), name no
// archive and no dot-name of the agent's; anything else must be refused.
// Seeds: the f.Add calls and testdata/fuzz/FuzzPathPattern.
func FuzzPathPattern(f *testing.F) {
	f.Add("${.PVC.namespace}/${.PVC.name}", "default", "data", "team", "a", "dir", "x/y")
	f.Add("${.PVC.labels.team}/${.PVC.annotations.dir}", "ns", "c", "team", "..", "dir", "../../etc")
	f.Add("${.PVC.annotations.dir}", "ns", "c", "k", "v", "dir", "/etc")
	f.Add("a/${.PVC.labels.k}", "ns", "c", "k", "", "d", "")
	f.Add("${.PVC.labels.k}${.PVC.labels.k}", "ns", "c", "k", ".", "d", "")
	f.Add("x/${.PVC.name}", "ns", "ARCHIVED-c", "k", "v", "d", "a//b")
	f.Add("${.PVC.name", "ns", "c", "k", "v", "d", "")
	f.Add("${.PVC.labels.}", "ns", "c", "", "v", "d", "")
	f.Fuzz(func(t *testing.T, pattern, namespace, name, labelKey, labelValue, annKey, annValue string) {
		claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels:      map[string]string{labelKey: labelValue},
			Annotations: map[string]string{annKey: annValue},
		}}
		rel, err := expandPattern(pattern, claim)
		if err != nil {
			return
		}
		if checkPattern(pattern) != nil {
			t.Fatalf("pattern %q expands to %q but does not check", pattern, rel)
		}
		assertInsideExport(t, pattern, rel)
	})
}

func assertInsideExport(t *testing.T, pattern, rel string) {
	t.Helper()
	if err := storagedir.ValidRel(rel); err != nil {
		t.Fatalf("pattern %q expands to %q: %v", pattern, rel, err)
	}
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || !filepath.IsLocal(rel) {
		t.Fatalf("pattern %q expands to %q, not a clean relative path inside the export", pattern, rel)
	}
	const export = "/exports/e"
	if joined := path.Join(export, rel); !strings.HasPrefix(joined, export+"/") {
		t.Fatalf("pattern %q expands to %q, which joins to %q outside %s", pattern, rel, joined, export)
	}
	for _, elem := range strings.Split(rel, "/") {
		if elem == ".." || strings.HasPrefix(elem, ".") || strings.HasPrefix(strings.ToLower(elem), storagedir.ArchivePrefix) {
			t.Fatalf("pattern %q expands to %q with component %q", pattern, rel, elem)
		}
	}
}

// FuzzParseClass checks a StorageClass's server, path and mount options
// as parseClass reads them: a class it accepts gives an export that reads
// back from its annotation form (parseExport), and PersistentVolumes the
// NFS plugin accepts, whose server and path mount.nfs reads as written.
// Seeds: the f.Add calls and testdata/fuzz/FuzzParseClass.
func FuzzParseClass(f *testing.F) {
	f.Add("nfs.example", "/exports/e", "${.PVC.name}", "hard\nnfsvers=4.1")
	f.Add("[fd00::1]", "/e/", "", "")
	f.Add("[a]:x", "/e", "", "")
	f.Add("fd00::1", "/e", "", "")
	f.Add("-o", "/e", "", "")
	f.Add("s", "/e,rw", "", "-o\nx y")
	f.Fuzz(func(t *testing.T, server, exportPath, pattern, options string) {
		sc := &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: "sc"},
			Provisioner: "volume-agent.io/nfs-subdir",
			Parameters:  map[string]string{ParamServer: server, ParamPath: exportPath},
		}
		if pattern != "" {
			sc.Parameters[ParamPathPattern] = pattern
		}
		if options != "" {
			sc.MountOptions = strings.Split(options, "\n")
		}
		c, err := parseClass(sc)
		if err != nil {
			return
		}
		back, err := parseExport(c.export.String())
		if err != nil || back != c.export {
			t.Fatalf("export %+v reads back from %q as %+v (%v)", c.export, c.export.String(), back, err)
		}
		for _, rel := range []string{"", "ns-claim-pv"} {
			pv := &v1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "pv"},
				Spec: v1.PersistentVolumeSpec{MountOptions: c.options, PersistentVolumeSource: v1.PersistentVolumeSource{
					NFS: &v1.NFSVolumeSource{Server: c.export.server, Path: path.Join(c.export.path, rel)},
				}},
			}
			if err := (&nfs.Plugin{}).Validate(&volume.Spec{Pod: &v1.Pod{}, Volume: &v1.Volume{Name: "v"}, PV: pv}); err != nil {
				t.Fatalf("class with server %q, path %q, options %q accepted, but its PV is not: %v", server, exportPath, c.options, err)
			}
		}
	})
}
