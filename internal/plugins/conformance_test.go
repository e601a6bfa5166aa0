package plugins_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/plugins/configmap"
	"github.com/volume-agent/volume-agent/internal/plugins/downwardapi"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/local"
	"github.com/volume-agent/volume-agent/internal/plugins/nfs"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/plugins/projected"
	"github.com/volume-agent/volume-agent/internal/plugins/secret"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// TestConformance runs the conformance suite for every plugin of the default
// registry, on a fake mounter and, as root, on the real one. A plugin added
// to the registry without a case here fails the test.
func TestConformance(t *testing.T) {
	mounters := map[string]mount.Mounter{"fake": &mount.Fake{}}
	if os.Geteuid() == 0 {
		mounters["system"] = mount.System{}
	} else {
		t.Log("not root: running the conformance suite on mount.Fake only")
	}
	for name, m := range mounters {
		t.Run(name, func(t *testing.T) {
			localRoot := t.TempDir()
			reg := plugins.Default(plugins.Config{Mounter: m, Tokens: plugintest.Tokens{Ver: "1"}, NodeName: "node-1", LocalRoot: localRoot})
			cases := conformanceCases(t, localRoot)
			for _, p := range reg.All() {
				named, ok := cases[p.Name()]
				if !ok {
					t.Errorf("plugin %s has no conformance case: add one to conformanceCases", p.Name())
				}
				delete(cases, p.Name())
				for caseName, c := range named {
					if c.Plugin == nil {
						c.Plugin = p
					}
					c.Mounter = m
					t.Run(p.Name()+"/"+caseName, func(t *testing.T) { plugintest.Conformance(t, c) })
				}
			}
			for name := range cases {
				t.Errorf("conformance case for %s, which is not in the default registry", name)
			}
		})
	}
}

// conformanceCases returns cases by plugin name; Plugin and Mounter are
// filled in by the caller. localRoot is the registry's local path root.
func conformanceCases(t *testing.T, localRoot string) map[string]map[string]plugintest.Case {
	host := filepath.Join(t.TempDir(), "host")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	plugintest.WriteFile(t, filepath.Join(host, "host-data"), "on the host")
	missing := filepath.Join(host, "missing")
	source, export := dataDir(t, "on-the-disk", "local data"), dataDir(t, "on-the-disk", "local data")
	csiVolume := filepath.Join(localRoot, "default-data-pv-1") // as the local provisioner names it
	plugintest.WriteFile(t, filepath.Join(csiVolume, "on-the-disk"), "local data")
	memory := spec(v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}})
	creds := spec(v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}})
	all := spec(v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: ref("cfg")}},
		{Secret: &v1.SecretProjection{LocalObjectReference: ref("creds")}},
		{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", Audience: "api"}},
	}}})
	return map[string]map[string]plugintest.Case{
		emptydir.Name: {
			"disk":   {Spec: spec(v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}), CheckContent: checkMode(0o777)},
			"memory": {Spec: memory, Tmpfs: true, CheckContent: checkMode(0o777), Failing: mountFails(emptydir.Name, memory)},
		},
		hostpath.Name: {
			"directory": {
				Spec:  spec(v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: host, Type: ptr(v1.HostPathDirectory)}}),
				NoDir: true, CheckContent: checkFile("host-data", "on the host"),
				Failing: withSpec(&hostpath.Plugin{}, spec(v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: missing, Type: ptr(v1.HostPathDirectory)}})),
			},
		},
		configmap.Name: {
			"data": {
				Spec:         spec(v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: ref("cfg")}}),
				CheckContent: checkFile("key", "config value"),
				Failing: withSpec(&configmap.Plugin{Mounter: &mount.Fake{}}, spec(v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
					LocalObjectReference: ref("cfg"), Items: []v1.KeyToPath{{Key: "key", Path: "../escape"}},
				}})),
			},
		},
		secret.Name: {
			"data": {Spec: creds, Tmpfs: true, CheckContent: checkFile("password", "hunter2"), Failing: mountFails(secret.Name, creds)},
		},
		downwardapi.Name: {
			"metadata": {
				Spec: spec(v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
					{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				}}}),
				CheckContent: checkFile("name", "web"),
				Failing: withSpec(&downwardapi.Plugin{Mounter: &mount.Fake{}}, spec(v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
					{Path: "..data/name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				}}})),
			},
		},
		local.Name: {
			"directory": {
				Spec: localSpec(source), Source: source, CheckContent: checkFile("on-the-disk", "local data"),
				Failing: withSpec(&local.Plugin{Mounter: mount.System{}}, localSpec(missing)),
			},
		},
		local.CSIName: {
			"directory": {
				Spec: csiSpec("default-data-pv-1"), Source: csiVolume, CheckContent: checkFile("on-the-disk", "local data"),
				Failing: withSpec(&local.CSIPlugin{Local: &local.Plugin{Mounter: mount.System{}, NodeName: "node-1"}, Root: localRoot}, csiSpec("missing")),
			},
		},
		nfs.Name: {
			// The kernel here has no NFS client: a bind mount of a
			// directory stands in for mount.nfs. test/e2e mounts through
			// a real NFS protocol connection.
			"export-bound": {
				Plugin: &nfs.Plugin{Tool: bindExport{export}}, Spec: nfsSpec(), Source: export,
				CheckContent: checkFile("on-the-disk", "local data"),
				Failing:      withSpec(&nfs.Plugin{Tool: bindExport{missing}}, nfsSpec()),
			},
		},
		projected.Name: {
			"all-sources": {Spec: all, Tmpfs: true, CheckContent: checkFile("token", "token-for-sa/api"), Failing: mountFails(projected.Name, all)},
		},
	}
}

// mountFails returns the named plugin on a mounter whose every mount fails.
func mountFails(name string, s *volume.Spec) func() (volume.Plugin, *volume.Spec) {
	return func() (volume.Plugin, *volume.Spec) {
		fake := &mount.Fake{MountErr: errors.New("mount: permission denied")}
		p, _ := plugins.Default(plugins.Config{Mounter: fake, Tokens: plugintest.Tokens{}}).Get(name)
		return p, s
	}
}

func withSpec(p volume.Plugin, s *volume.Spec) func() (volume.Plugin, *volume.Spec) {
	return func() (volume.Plugin, *volume.Spec) { return p, s }
}

func spec(src v1.VolumeSource) *volume.Spec {
	return &volume.Spec{
		Pod: &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
			Spec:       v1.PodSpec{ServiceAccountName: "sa", Containers: []v1.Container{{Name: "app"}}},
		},
		Volume: &v1.Volume{Name: "vol", VolumeSource: src},
		Objects: plugintest.Objects{
			ConfigMaps: map[string]*v1.ConfigMap{"default/cfg": {Data: map[string]string{"key": "config value"}}},
			Secrets:    map[string]*v1.Secret{"default/creds": {Data: map[string][]byte{"password": []byte("hunter2")}}},
		},
	}
}

// localSpec is a claim volume bound to a local PV of the directory path.
func localSpec(path string) *volume.Spec {
	s := spec(v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}})
	s.PV = &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec:       v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: path}}},
	}
	return s
}

// csiSpec is a claim volume bound to a CSI PV of the local driver, of the
// volume handle, on node-1.
func csiSpec(handle string) *volume.Spec {
	s := spec(v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}})
	s.PV = &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: local.Driver, VolumeHandle: handle}},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"node-1"}}},
			}}}},
		},
	}
	return s
}

// dataDir makes a directory holding one file, as a disk or an export would.
func dataDir(t *testing.T, name, data string) string {
	dir := t.TempDir()
	plugintest.WriteFile(t, filepath.Join(dir, name), data)
	return dir
}

// bindExport mounts its directory wherever an NFS export is asked for.
type bindExport struct{ dir string }

func (b bindExport) Mount(_, target, _ string, options []string) error {
	return mount.System{}.Mount(context.Background(), mount.Mount{Type: "none", Source: b.dir, Options: append([]string{"bind"}, options...)}, target)
}

func nfsSpec() *volume.Spec {
	return spec(v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "nfs.example", Path: "/exports/data"}})
}

func checkMode(want os.FileMode) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
}

func checkFile(name, want string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		if got := plugintest.ReadFile(t, filepath.Join(path, name)); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func ref(name string) v1.LocalObjectReference { return v1.LocalObjectReference{Name: name} }

func ptr[T any](v T) *T { return &v }
