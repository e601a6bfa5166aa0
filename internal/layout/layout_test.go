package layout

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestPaths(t *testing.T) {
	r := Root("/var/lib/agent")
	tests := []struct{ got, want string }{
		{r.PodsDir(), "/var/lib/agent/pods"},
		{r.PodDir("u1"), "/var/lib/agent/pods/u1"},
		{r.VolumesDir("u1"), "/var/lib/agent/pods/u1/volumes"},
		{r.PluginDir("u1", "kubernetes.io/configmap"), "/var/lib/agent/pods/u1/volumes/kubernetes.io~configmap"},
		{r.VolumeDir("u1", "kubernetes.io/configmap", "cfg"), "/var/lib/agent/pods/u1/volumes/kubernetes.io~configmap/cfg"},
		{r.VolumeDir("u1", "plain", "v"), "/var/lib/agent/pods/u1/volumes/plain/v"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("path = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestEscapePluginName(t *testing.T) {
	tests := []struct{ name, escaped string }{
		{"kubernetes.io/configmap", "kubernetes.io~configmap"},
		{"kubernetes.io/empty-dir", "kubernetes.io~empty-dir"},
		{"example.com/a/b", "example.com~a~b"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := EscapePluginName(tt.name); got != tt.escaped {
			t.Errorf("EscapePluginName(%q) = %q, want %q", tt.name, got, tt.escaped)
		}
		if got := UnescapePluginName(tt.escaped); got != tt.name {
			t.Errorf("UnescapePluginName(%q) = %q, want %q", tt.escaped, got, tt.name)
		}
		if got := UnescapePluginName(EscapePluginName(tt.name)); got != tt.name {
			t.Errorf("round trip of %q gave %q", tt.name, got)
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"/", false},
		{"../x", false},
		{"a\x00b", false},
		{strings.Repeat("a", 256), false},
		{strings.Repeat("a", 255), true},
		{"...", true},
		{".hidden", true},
		{"5d3b1c2e-8f4a-4b6c-9d0e-1f2a3b4c5d6e", true},
		{"cfg", true},
		{"a~b", true},
	}
	for _, tt := range tests {
		err := ValidName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	mkdir(t, filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestScan(t *testing.T) {
	root := Root(t.TempDir())
	outside := t.TempDir()
	mkdir(t, filepath.Join(outside, "evil-plugin", "evil-volume"))

	mkdir(t, root.VolumeDir("p1", "kubernetes.io/configmap", "cfg"))
	mkdir(t, root.VolumeDir("p1", "kubernetes.io/empty-dir", "cache"))
	mkdir(t, root.VolumeDir("p1", "kubernetes.io/empty-dir", "data"))
	writeFile(t, filepath.Join(root.PluginDir("p1", "kubernetes.io/empty-dir"), "stray-file"))
	symlink(t, outside, filepath.Join(root.PluginDir("p1", "kubernetes.io/empty-dir"), "linked-volume"))
	symlink(t, outside, filepath.Join(root.VolumesDir("p1"), "linked~plugin"))
	mkdir(t, root.PodDir("p2")) // a pod directory without volumes
	writeFile(t, filepath.Join(root.VolumesDir("p3"), "not-a-plugin"))
	writeFile(t, filepath.Join(root.PodsDir(), "not-a-pod"))
	symlink(t, outside, filepath.Join(root.PodsDir(), "linked-pod"))

	pods, volumes, err := root.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if want := []types.UID{"p1", "p2", "p3"}; !reflect.DeepEqual(pods, want) {
		t.Errorf("pods = %v, want %v", pods, want)
	}
	want := []Found{
		{PodUID: "p1", Plugin: "kubernetes.io/configmap", Volume: "cfg", Dir: root.VolumeDir("p1", "kubernetes.io/configmap", "cfg")},
		{PodUID: "p1", Plugin: "kubernetes.io/empty-dir", Volume: "cache", Dir: root.VolumeDir("p1", "kubernetes.io/empty-dir", "cache")},
		{PodUID: "p1", Plugin: "kubernetes.io/empty-dir", Volume: "data", Dir: root.VolumeDir("p1", "kubernetes.io/empty-dir", "data")},
	}
	if !reflect.DeepEqual(volumes, want) {
		t.Errorf("volumes = %+v\nwant %+v", volumes, want)
	}
}

// Published devices are files below volumeDevices: regular files (the
// file a device is bind-mounted on, as the directory lists it) count,
// symlinks and directories do not.
func TestScanDevices(t *testing.T) {
	root := Root(t.TempDir())
	outside := t.TempDir()
	writeFile(t, root.DevicePath("p1", "kubernetes.io/local-volume", "pv-1"))
	mkdir(t, root.DevicePath("p1", "kubernetes.io/local-volume", "a-dir"))
	symlink(t, "/dev/null", root.DevicePath("p1", "kubernetes.io/local-volume", "link"))
	symlink(t, outside, root.DevicePluginDir("p1", "linked~plugin"))
	writeFile(t, filepath.Join(outside, "pv-2"))
	mkdir(t, root.VolumeDir("p1", "kubernetes.io/empty-dir", "data"))
	_, volumes, err := root.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want := []Found{
		{PodUID: "p1", Plugin: "kubernetes.io/empty-dir", Volume: "data", Dir: root.VolumeDir("p1", "kubernetes.io/empty-dir", "data")},
		{PodUID: "p1", Plugin: "kubernetes.io/local-volume", Volume: "pv-1", Dir: root.DevicePath("p1", "kubernetes.io/local-volume", "pv-1"), Block: true},
	}
	if !reflect.DeepEqual(volumes, want) {
		t.Errorf("volumes = %+v\nwant %+v", volumes, want)
	}
	if got := root.DevicePath("u", "kubernetes.io/local-volume", "pv"); got != filepath.Join(string(root), "pods/u/volumeDevices/kubernetes.io~local-volume/pv") {
		t.Errorf("DevicePath = %s", got)
	}
}

func TestScanMissingRoot(t *testing.T) {
	for _, root := range []Root{Root(filepath.Join(t.TempDir(), "missing")), Root(t.TempDir())} {
		pods, volumes, err := root.Scan()
		if err != nil || len(pods) != 0 || len(volumes) != 0 {
			t.Fatalf("Scan of %s = %v, %v, %v; want empty", root, pods, volumes, err)
		}
	}
}

func TestScanError(t *testing.T) {
	// A pods directory that cannot be opened fails the scan rather than
	// report an empty node, which would forget mounted volumes.
	root := Root(filepath.Join(t.TempDir(), strings.Repeat("x", 300)))
	if _, _, err := root.Scan(); err == nil {
		t.Fatal("Scan of an unopenable pods directory succeeded")
	}
}

func TestScanFileWhereADirectoryShouldBe(t *testing.T) {
	root := Root(t.TempDir())
	writeFile(t, root.VolumesDir("p1"))
	pods, volumes, err := root.Scan()
	if err != nil || !reflect.DeepEqual(pods, []types.UID{"p1"}) || len(volumes) != 0 {
		t.Fatalf("Scan = %v, %v, %v; want pod p1 without volumes", pods, volumes, err)
	}
}

// A symlink at any level below the root is never followed: not the pods
// directory's entries, not a pod's volumes directory, not a plugin directory.
func TestScanNeverFollowsSymlinks(t *testing.T) {
	root := Root(t.TempDir())
	outside := t.TempDir()
	mkdir(t, filepath.Join(outside, "kubernetes.io~empty-dir", "data"))
	mkdir(t, filepath.Join(outside, "data"))

	mkdir(t, root.PodDir("p1"))
	symlink(t, outside, root.VolumesDir("p1"))
	mkdir(t, root.VolumesDir("p2"))
	symlink(t, outside, root.PluginDir("p2", "kubernetes.io/empty-dir"))

	pods, volumes, err := root.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if want := []types.UID{"p1", "p2"}; !reflect.DeepEqual(pods, want) {
		t.Errorf("pods = %v, want %v", pods, want)
	}
	if len(volumes) != 0 {
		t.Errorf("Scan followed a symlink out of the root: %+v", volumes)
	}
}
