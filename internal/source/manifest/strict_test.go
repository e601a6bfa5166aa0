package manifest

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// cachePod is a pod with an emptyDir of the given size limit; field is
// the name the manifest gives sizeLimit (a typo, say).
func cachePod(field, limit string) string {
	return pod("web", "v1") + "  volumes:\n  - name: cache\n    emptyDir:\n      " + field + ": " + limit + "\n"
}

// sizeLimit returns the size limit of the web pod's cache volume, or "".
func (h *harness) sizeLimit() string {
	for _, p := range h.src.Pods() {
		if p.Name == "web" && len(p.Spec.Volumes) > 0 && p.Spec.Volumes[0].EmptyDir != nil {
			if l := p.Spec.Volumes[0].EmptyDir.SizeLimit; l != nil {
				return l.String()
			}
		}
	}
	return ""
}

// TestUnknownFieldRejectsTheFile: a misspelt field (sizeLimt) is an error,
// not a warning: the file is rejected whole and its last good content, with
// the size limit, stays in force until the typo is fixed.
func TestUnknownFieldRejectsTheFile(t *testing.T) {
	h := start(t, t.TempDir())
	h.write("web.yaml", cachePod("sizeLimit", "1Gi"))
	h.expect("create", func() bool { return h.sizeLimit() == "1Gi" })

	h.write("web.yaml", strings.Replace(cachePod("sizeLimt", "2Gi"), "image: v1", "image: v2", 1))
	h.expect("error reported", func() bool { return len(h.src.Status().Errors) == 1 })
	st := h.src.Status()
	if want := "web.yaml:11: spec.volumes[0].emptyDir.sizeLimt: unknown field (did you mean sizeLimit?)"; st.Errors[0] != want {
		t.Errorf("error %q, want %q", st.Errors[0], want)
	}
	if !st.Synced || h.image("web") != "v1" || h.sizeLimit() != "1Gi" {
		t.Errorf("last good content not in force: status %+v, image %q, sizeLimit %q", st, h.image("web"), h.sizeLimit())
	}
	if h.logs.FilterMessage("manifest file rejected, last good content stays in force").Len() != 1 {
		t.Errorf("rejection not logged once: %v", h.logs.All())
	}

	// A typo deep in a list rejects the file as well.
	h.write("web.yaml", strings.Replace(cachePod("sizeLimit", "2Gi"), "image: v1}",
		"image: v3, volumeMounts: [{name: cache, mountPath: /c, subPathh: x}]}", 1))
	h.expect("second error reported", func() bool {
		st := h.src.Status()
		return len(st.Errors) == 1 && strings.Contains(st.Errors[0], "spec.containers[0].volumeMounts[0].subPathh: unknown field")
	})
	if h.image("web") != "v1" || h.sizeLimit() != "1Gi" {
		t.Errorf("last good content not in force: image %q, sizeLimit %q", h.image("web"), h.sizeLimit())
	}

	h.write("web.yaml", cachePod("sizeLimit", "2Gi"))
	h.expect("fixed", func() bool { return len(h.src.Status().Errors) == 0 && h.sizeLimit() == "2Gi" })
	if got := resource.MustParse(h.sizeLimit()); got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("sizeLimit %v", got)
	}
}

// TestUnknownFieldAtStartKeepsUnsynced: a file with an unknown field at
// start has no good content yet, so the source is not synced, as for any
// bad file, and nothing it might define counts as absent.
func TestUnknownFieldAtStartKeepsUnsynced(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", cachePod("sizeLimt", "1Gi"))
	writeFile(t, dir, "other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n")
	h := start(t, dir)
	st := h.src.Status()
	if st.Synced || !strings.Contains(st.Reason, "web.yaml") || len(st.Errors) != 1 || len(h.src.Pods()) != 0 {
		t.Fatalf("status %+v, pods %v; want unsynced, waiting for web.yaml", st, podNames(h.src.Pods()))
	}
	h.write("web.yaml", cachePod("sizeLimit", "1Gi"))
	h.expect("synced once fixed", func() bool { return h.src.Status().Synced && h.sizeLimit() == "1Gi" })
}
