package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
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

// TestRoomCountsWholeImages: on a 64 MiB root, image volumes count with
// their whole image, larger than the request by what ext4 keeps for
// itself: a 60Mi claim, whose image would not fit, is refused before
// anything is made; a 50Mi one is made, and the room left is the root
// less its whole image, less than 14 MiB.
func TestRoomCountsWholeImages(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"losetup", "mkfs.ext4", "blkid"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (test/deps.sh installs it)", tool)
		}
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", root).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", root).Run() })
	p := enforcingOn(t, root, true)
	if _, err := p.Provision(t.Context(), sized("big", "60Mi")); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("a 60Mi image volume on a 64 MiB root: %v; want ErrNoRoom", err)
	}
	pv := provision(t, p, sized("fits", "50Mi"))
	img, err := os.Stat(pv.Spec.Local.Path + capacity.ImageSuffix)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Room(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n > 64<<20-img.Size() || n >= 14<<20 {
		t.Errorf("room %d after a 50Mi volume of a %d-byte image on 64 MiB", n, img.Size())
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
}
