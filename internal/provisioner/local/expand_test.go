package local

import (
	"errors"
	"testing"

	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
)

func TestExpand(t *testing.T) {
	p, f := newEnforcing(t, t.TempDir())
	pv := provision(t, p, enforcing("data"))
	name := "ns-data-" + pv.Name
	const size = 10 << 30
	if err := p.Expand(t.Context(), pv, size); err != nil {
		t.Fatal(err)
	}
	if err := p.Expand(t.Context(), pv, size); err != nil { // again: nothing to do
		t.Fatal(err)
	}
	if got := f.sizes[name]; got != size {
		t.Errorf("size = %d, want %d", got, size)
	}
	if err := p.Expand(t.Context(), pv, 1<<30); !errors.Is(err, capacity.ErrShrink) {
		t.Errorf("shrink: err = %v, want ErrShrink", err)
	}
	pv.Annotations[AnnCapacity] = "btrfs"
	if err := p.Expand(t.Context(), pv, 20<<30); err == nil {
		t.Error("a PV of another backend: no error")
	}
}

func TestExpandPlainDirectory(t *testing.T) {
	p, _ := newProvisioner(t, t.TempDir())
	pv := provision(t, p, request("data", ""))
	if err := p.Expand(t.Context(), pv, 10<<30); err != nil {
		t.Errorf("plain directory: %v", err)
	}
}
