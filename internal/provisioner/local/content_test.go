package local

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
)

// snapBackend is fakeBackend with snapshots: it records what CreateFrom
// was asked to copy.
type snapBackend struct {
	*fakeBackend
	snaps map[string]capacity.Snapshot
	from  map[string]capacity.Source
}

func (s *snapBackend) Snapshot(_ context.Context, source, snap string) (capacity.Snapshot, error) {
	if old, ok := s.snaps[snap]; ok && old.Source != source {
		return capacity.Snapshot{}, capacity.ErrExists
	}
	s.snaps[snap] = capacity.Snapshot{Name: snap, Source: source, Size: s.sizes[source]}
	return s.snaps[snap], nil
}

func (s *snapBackend) DeleteSnapshot(_ context.Context, snap string) error {
	delete(s.snaps, snap)
	return nil
}

func (s *snapBackend) Snapshots(context.Context) ([]capacity.Snapshot, error) { return nil, nil }

func (s *snapBackend) SnapshotInfo(_ context.Context, snap string) (capacity.Snapshot, error) {
	if sn, ok := s.snaps[snap]; ok {
		return sn, nil
	}
	return capacity.Snapshot{}, capacity.ErrNotFound
}

func (s *snapBackend) CreateFrom(ctx context.Context, name string, size int64, src capacity.Source) (string, error) {
	s.from[name] = src
	return s.Create(ctx, name, size)
}

func newSnapshotting(t *testing.T, root string) (*Provisioner, *snapBackend) {
	t.Helper()
	p, f := newEnforcing(t, root)
	sb := &snapBackend{fakeBackend: f, snaps: map[string]capacity.Snapshot{}, from: map[string]capacity.Source{}}
	p.cfg.Capacity = sb
	return p, sb
}

// A claim with a data source is made by CreateFrom from the source's
// backend name: a clone from the PV's volume, a restore from the snapshot.
func TestProvisionFromContent(t *testing.T) {
	root := t.TempDir()
	p, sb := newSnapshotting(t, root)
	src := provision(t, p, enforcing("src"))
	if _, err := p.Snapshot(t.Context(), src, "snap-1"); err != nil {
		t.Fatal(err)
	}
	clone := enforcing("clone")
	clone.Content = &provisioner.Content{Volume: src}
	restore := enforcing("restore")
	restore.Content = &provisioner.Content{Snapshot: "snap-1"}
	for _, req := range []provisioner.Request{clone, restore} {
		pv := provision(t, p, req)
		name := filepath.Base(pv.Spec.Local.Path)
		got, ok := sb.from[name]
		want := capacity.Source{Snapshot: "snap-1"}
		if req.Content.Volume != nil {
			want = capacity.Source{Volume: filepath.Base(src.Spec.Local.Path)}
		}
		if !ok || got != want {
			t.Errorf("%s made from %+v (%t), want %+v", name, got, ok, want)
		}
	}
	if sb.snaps["snap-1"].Source != filepath.Base(src.Spec.Local.Path) {
		t.Errorf("snapshot = %+v", sb.snaps["snap-1"])
	}
}

// Plain directories have no snapshots or clones; a backend without
// snapshots makes none; a clone smaller than its source is refused.
// Nothing is made in any of these cases.
func TestProvisionFromContentRefuses(t *testing.T) {
	root := t.TempDir()
	p, sb := newSnapshotting(t, root)
	plain := provision(t, p, request("plain", ""))
	if _, err := p.Snapshot(t.Context(), plain, "snap-p"); err == nil || !strings.Contains(err.Error(), `enforce: "true"`) {
		t.Errorf("snapshot of a plain directory: %v", err)
	}
	src := provision(t, p, enforcing("src"))
	cases := map[string]func(*provisioner.Request){
		"plain class": func(r *provisioner.Request) {
			r.Class.Parameters = map[string]string{ParamEnforce: "false"}
			r.Content = &provisioner.Content{Volume: src}
		},
		"plain source": func(r *provisioner.Request) { r.Content = &provisioner.Content{Volume: plain} },
		"both":         func(r *provisioner.Request) { r.Content = &provisioner.Content{Volume: src, Snapshot: "x"} },
		"smaller": func(r *provisioner.Request) {
			big := src.DeepCopy()
			big.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("6Gi")
			r.Content = &provisioner.Content{Volume: big}
		},
	}
	for name, edit := range cases {
		req := enforcing("new")
		edit(&req)
		_, err := p.Provision(t.Context(), req)
		switch {
		case err == nil:
			t.Errorf("%s: provisioned", name)
		case name == "smaller" && !errors.Is(err, ErrTooSmall):
			t.Errorf("%s: %v, want ErrTooSmall", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if len(sb.from) != 0 {
		t.Errorf("made from content: %v", sb.from)
	}
	// A backend without snapshots.
	p2, _ := newEnforcing(t, t.TempDir())
	req := enforcing("new")
	req.Content = &provisioner.Content{Snapshot: "snap-1"}
	if _, err := p2.Provision(t.Context(), req); err == nil || !strings.Contains(err.Error(), "takes no snapshots") {
		t.Errorf("restore without a snapshotting backend: %v", err)
	}
	if _, err := p2.Snapshot(t.Context(), src, "s"); err == nil {
		t.Error("snapshot without a snapshotting backend succeeded")
	}
}
