package local

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// sized is enforcing with a request of q.
func sized(name, q string) provisioner.Request {
	req := enforcing(name)
	req.Claim.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(q)
	return req
}

// TestRoomCountsWhatVolumesMayStillWrite: on a root of 64 MiB, a 40Mi
// volume leaves about 24 MiB of room although nothing was written; a
// second 40Mi claim is refused (ErrNoRoom, and ErrReschedule so that the
// scheduler chooses another node), a retry of the first is not, growing
// the first by 16 MiB fits and by 40 MiB more does not, and deleting it
// gives the room back. OnChange hears of every change.
func TestRoomCountsWhatVolumesMayStillWrite(t *testing.T) {
	needRoot(t)
	root := filepath.Join(t.TempDir(), "root")
	p, _ := newEnforcing(t, root)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", root).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", root).Run() })
	changes := 0
	p.cfg.OnChange = func() { changes++ }
	room := func() int64 {
		t.Helper()
		n, err := p.Room(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := room(); n != 64<<20 {
		t.Fatalf("Room of an empty 64 MiB root = %d", n)
	}

	first := sized("first", "40Mi")
	pv := provision(t, p, first)
	if n := room(); n != 24<<20 {
		t.Errorf("Room after a 40Mi volume = %d, want %d", n, 24<<20)
	}
	second := sized("second", "40Mi")
	second.Tentative = true // as the cluster controller asks
	_, err := p.Provision(t.Context(), second)
	if !errors.Is(err, ErrNoRoom) || !errors.Is(err, provisioner.ErrReschedule) {
		t.Fatalf("a second 40Mi volume: %v; want ErrNoRoom and ErrReschedule", err)
	}
	t.Logf("refused: %v", err)
	if got := entries(t, filepath.Join(root, RecordsDir)); len(got) != 0 {
		t.Errorf("records after a refusal that made nothing: %v", got)
	}
	provision(t, p, first) // a retry needs no more room

	if err := p.Expand(t.Context(), pv, 56<<20); err != nil {
		t.Fatalf("grow 40Mi to 56Mi with 24 MiB of room: %v", err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("56Mi")
	if err := p.Expand(t.Context(), pv, 96<<20); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("grow 56Mi to 96Mi with 8 MiB of room: %v; want ErrNoRoom", err)
	}
	if err := p.Delete(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	if n := room(); n != 64<<20 {
		t.Errorf("Room after the volume was deleted = %d", n)
	}
	if changes != 4 { // made, found again, grown, deleted
		t.Errorf("OnChange called %d times, want 4", changes)
	}
}
