package manifest

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestNewValidatesConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "file.yaml", "")
	logger := zap.NewNop()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing dir", Config{Dir: filepath.Join(dir, "nope"), NodeName: "n", Logger: logger}, "no such file or directory"},
		{"dir is a file", Config{Dir: filepath.Join(dir, "file.yaml"), NodeName: "n", Logger: logger}, "is not a directory"},
		{"no dir", Config{NodeName: "n", Logger: logger}, "Dir is required"},
		{"no node name", Config{Dir: dir, Logger: logger}, "NodeName is required"},
		{"no logger", Config{Dir: dir, NodeName: "n"}, "Logger is required"},
		{"negative resync", Config{Dir: dir, NodeName: "n", Logger: logger, Resync: -1}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestNewStartsNothing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pod.yaml", pod("web", "nginx"))
	src, err := New(Config{Dir: dir, NodeName: "node-1", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	st := src.Status()
	if src.Name() != "manifests" || st.Name != "manifests" || st.Synced || st.Reason == "" {
		t.Errorf("before Run: name %q, status %+v", src.Name(), st)
	}
	if len(src.Pods()) != 0 || src.Node() != nil {
		t.Errorf("New read manifests before Run")
	}
}

func TestServesAllKinds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "all.yaml", readTestdata(t, "all-kinds.yaml"))
	h := start(t, dir)
	if st := h.src.Status(); !st.Synced || st.Reason != "" || len(st.Errors) > 0 {
		t.Fatalf("status %+v", st)
	}
	if got := podNames(h.src.Pods()); !slices.Equal(got, []string{"default/web"}) {
		t.Errorf("pods %v", got)
	}
	if cm, err := h.src.Objects().ConfigMap("default", "web-config"); err != nil || cm.Name != "web-config" {
		t.Errorf("ConfigMap: %v, %v", cm, err)
	}
	if s, err := h.src.Objects().Secret("default", "web-creds"); err != nil || string(s.Data["password"]) != "new" {
		t.Errorf("Secret: %v", err)
	}
	if pv, err := h.src.PersistentVolume("local-data"); err != nil || pv.Name != "local-data" {
		t.Errorf("PersistentVolume: %v, %v", pv, err)
	}
	if pvc, err := h.src.PersistentVolumeClaim("default", "web-data"); err != nil || pvc.Name != "web-data" {
		t.Errorf("PersistentVolumeClaim: %v, %v", pvc, err)
	}
	if node := h.src.Node(); node == nil || node.Labels["kubernetes.io/hostname"] != "node-1" {
		t.Errorf("Node: %v", node)
	}
	if scs := h.src.StorageClasses(); len(scs) != 1 || scs[0].Name != "local-dynamic" {
		t.Errorf("StorageClasses: %v", scs)
	}
}

func TestMissingObjectsAreNotFound(t *testing.T) {
	h := start(t, t.TempDir())
	_, errCM := h.src.Objects().ConfigMap("default", "nope")
	_, errSecret := h.src.Objects().Secret("default", "nope")
	_, errPV := h.src.PersistentVolume("nope")
	_, errPVC := h.src.PersistentVolumeClaim("default", "nope")
	for _, err := range []error{errCM, errSecret, errPV, errPVC} {
		if !errors.Is(err, volume.ErrNotFound) {
			t.Errorf("error %v does not wrap volume.ErrNotFound", err)
		}
	}
	if h.src.Node() != nil {
		t.Errorf("Node() without a Node object is not nil")
	}
}

// Until every file has parsed once since start, an object that is not
// there may be in a file that does not parse yet: it is not known yet, not
// absent — an optional configMap volume must wait, not be emptied.
func TestObjectsAreNotKnownUntilEveryFileParsed(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app\ndata: [oops\n")
	writeFile(t, dir, "other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n")
	h := start(t, dir)
	_, err := h.src.Objects().ConfigMap("default", "app")
	if !errors.Is(err, volume.ErrNotReady) || errors.Is(err, volume.ErrNotFound) || !strings.Contains(err.Error(), "cm.yaml") {
		t.Fatalf("lookup while cm.yaml never parsed = %v; want not known yet, naming the file", err)
	}
	if _, err := h.src.Objects().ConfigMap("default", "other"); err != nil {
		t.Fatalf("an object of a file that parsed: %v", err)
	}
	h.write("cm.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
	h.expect("the source synced", func() bool { return h.src.Status().Synced })
	if _, err := h.src.Objects().ConfigMap("default", "app"); !errors.Is(err, volume.ErrNotFound) {
		t.Fatalf("lookup once synced = %v; want not found", err)
	}
}

func TestNodeFiltering(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pods.yaml", pod("unbound", "a")+"---\n"+
		strings.Replace(pod("mine", "a"), "spec:\n", "spec:\n  nodeName: node-1\n", 1)+"---\n"+
		strings.Replace(pod("theirs", "a"), "spec:\n", "spec:\n  nodeName: node-2\n", 1)+"---\n"+
		"{apiVersion: v1, kind: Node, metadata: {name: node-2}}\n---\n{apiVersion: v1, kind: Node, metadata: {name: node-1}}\n")
	h := start(t, dir)
	pods := h.src.Pods()
	if got := podNames(pods); !slices.Equal(got, []string{"default/mine", "default/unbound"}) {
		t.Errorf("pods %v, want mine and unbound, sorted", got)
	}
	for _, p := range pods {
		if p.Spec.NodeName != "node-1" {
			t.Errorf("pod %s has nodeName %q, want node-1", p.Name, p.Spec.NodeName)
		}
	}
	if node := h.src.Node(); node == nil || node.Name != "node-1" {
		t.Errorf("Node() = %v, want node-1", node)
	}
}

func TestPodsSortedAndCopied(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b.yaml", pod("b", "x")+"---\n"+strings.Replace(pod("z", "x"), "name: z", "name: z\n  namespace: aaa", 1))
	writeFile(t, dir, "a.yaml", pod("c", "x")+"---\n"+pod("a", "x"))
	h := start(t, dir)
	pods := h.src.Pods()
	if got := podNames(pods); !slices.Equal(got, []string{"aaa/z", "default/a", "default/b", "default/c"}) {
		t.Errorf("pods %v", got)
	}
	pods[0] = nil
	if h.src.Pods()[0] == nil {
		t.Errorf("Pods() shares its slice with the source")
	}
}

func TestPodUIDStableAcrossSources(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pod.yaml", pod("web", "nginx"))
	first := start(t, dir).src.Pods()
	second := start(t, dir).src.Pods()
	if len(first) != 1 || len(second) != 1 || first[0].UID != second[0].UID || first[0].UID == "" {
		t.Errorf("uids %v and %v", first, second)
	}
	if first[0].ResourceVersion != second[0].ResourceVersion {
		t.Errorf("resourceVersion differs across restarts: %s vs %s", first[0].ResourceVersion, second[0].ResourceVersion)
	}
}

func TestListsPersistentVolumesAndClaims(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pvs.yaml", "{apiVersion: v1, kind: PersistentVolume, metadata: {name: pv-b}}\n---\n"+
		"{apiVersion: v1, kind: PersistentVolume, metadata: {name: pv-a}}\n---\n"+
		"{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c, namespace: zz}}\n---\n"+
		"{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: d}}\n---\n"+
		"{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: b}}\n---\n"+
		"{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n")
	h := start(t, dir)
	var pvs, claims []string
	for _, pv := range h.src.PersistentVolumes() {
		pvs = append(pvs, pv.Name)
	}
	for _, c := range h.src.PersistentVolumeClaims() {
		claims = append(claims, c.Namespace+"/"+c.Name)
	}
	if !slices.Equal(pvs, []string{"pv-a", "pv-b"}) || !slices.Equal(claims, []string{"default/b", "default/d", "zz/c"}) {
		t.Errorf("PersistentVolumes %v, PersistentVolumeClaims %v; want each kind only, sorted", pvs, claims)
	}
	if got, err := h.src.PersistentVolume("pv-a"); err != nil || got != h.src.PersistentVolumes()[0] {
		t.Errorf("the listed PersistentVolume is not the shared snapshot the lookup returns (%v)", err)
	}
}
