package nfssubdir

import (
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/internal/layout"
)

func TestMountName(t *testing.T) {
	base := mountName(export{"nfs.example", "/exports/k8s"}, []string{"hard"})
	if !strings.HasPrefix(base, "nfs.example_exports_k8s-") {
		t.Errorf("mountName = %q, want the export readable in it", base)
	}
	if again := mountName(export{"nfs.example", "/exports/k8s"}, []string{"hard"}); again != base {
		t.Errorf("mountName is not stable: %q then %q", base, again)
	}
	names := map[string]bool{base: true}
	for _, other := range []struct {
		e       export
		options []string
	}{
		{export{"nfs.example", "/exports/k8s"}, nil},
		{export{"nfs.example", "/exports/k8s"}, []string{"soft"}},
		{export{"nfs.example", "/exports_k8s"}, []string{"hard"}},
		{export{"nfs.example.", "exports/k8s"}, []string{"hard"}},
		{export{"fd00::1", "/exports/k8s"}, []string{"hard"}},
	} {
		name := mountName(other.e, other.options)
		if names[name] {
			t.Errorf("mountName(%v, %v) = %q, taken already", other.e, other.options, name)
		}
		names[name] = true
	}
	long := mountName(export{"s", "/" + strings.Repeat("../x/", 200) + "\x00é"}, nil)
	if err := layout.ValidName(long); err != nil || len(long) > 64 || strings.ContainsAny(long, "/\x00é") {
		t.Errorf("mountName of a hostile path = %q (%v), want one short safe element", long, err)
	}
}
