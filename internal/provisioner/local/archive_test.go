package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/btrfs/btrfstest"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
)

// btrfsProvisioner is a provisioner over a real btrfs backend on a new
// loop-backed btrfs with quotas on, which it returns with its root.
func btrfsProvisioner(t *testing.T) (*Provisioner, string) {
	t.Helper()
	root := btrfstest.Mount(t, true)
	return enforcingOn(t, root, false), root
}

// enforcingOn opens the capacity backend of root (images when image is
// set), recovers it as a start would, and makes a provisioner over it.
func enforcingOn(t *testing.T, root string, image bool) *Provisioner {
	t.Helper()
	b, err := capacity.Open(t.Context(), capacity.Config{Root: root, Logger: zap.NewNop(), ForceImage: image})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Root: root, NodeName: node, Mounter: mount.System{}, Logger: zap.NewNop(), Capacity: b})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestArchiveEnforced: a claim of a class with archiveOnDelete "true"
// that enforces capacity gets a volume; moved aside and deleted, the
// volume is kept as archived-<name> with its data, on btrfs (the
// subvolume, its qgroup limit kept) and on images (the image, detached);
// the room stays short of at least its size, also after a restart; the
// same claim provisioned again gets an empty volume; the archive removed
// by hand gives its room back.
func TestArchiveEnforced(t *testing.T) {
	t.Run("btrfs", func(t *testing.T) {
		p, root := btrfsProvisioner(t)
		checkArchive(t, p, root, false)
	})
	t.Run("image", func(t *testing.T) {
		p, _, root := imageProvisioner(t)
		checkArchive(t, p, root, true)
	})
}

func checkArchive(t *testing.T, p *Provisioner, root string, image bool) {
	const size = 20 << 20
	room := func(p *Provisioner) int64 {
		t.Helper()
		n, err := p.Room(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	empty := room(p)
	req := sized("data", "20Mi")
	req.Class.Parameters[provisioner.ParamArchiveOnDelete] = "true"
	pv := provision(t, p, req)
	if pv.Annotations[provisioner.AnnArchiveOnDelete] != "true" || pv.Annotations[AnnCapacity] == "" {
		t.Fatalf("PV annotations %v", pv.Annotations)
	}
	name := filepath.Base(pv.Spec.Local.Path)
	if err := os.WriteFile(filepath.Join(pv.Spec.Local.Path, "written"), []byte("by the pod"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := btrfstest.WriteSynced(filepath.Join(pv.Spec.Local.Path, "big"), 4<<20); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second finds it archived
		if err := p.MoveAside(t.Context(), pv); err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(t.Context(), pv); err != nil {
			t.Fatal(err)
		}
	}
	archive := filepath.Join(root, capacity.ArchivePrefix+name)
	if image {
		archive += capacity.ImageSuffix
	}
	if _, err := os.Lstat(pv.Spec.Local.Path); !os.IsNotExist(err) {
		t.Errorf("the volume's directory after archiving: %v, want it gone", err)
	}
	if got := readArchived(t, archive, image); got != "by the pod" {
		t.Errorf("archive %s holds %q, want the pod's data", archive, got)
	}
	// Within 1 MiB: btrfs counts its own metadata in a qgroup and in
	// statfs by other rules.
	if n := room(p); empty-n < size-(1<<20) {
		t.Errorf("room %d with a 20Mi archive, %d without: the archive is not counted with its size", n, empty)
	}
	// A restart keeps counting it.
	p = enforcingOn(t, root, image)
	archived := room(p)
	if empty-archived < size-(1<<20) {
		t.Errorf("room after a restart %d with a 20Mi archive, %d without", archived, empty)
	}
	// The same claim again gets a new, empty volume.
	again := provision(t, p, req)
	if _, err := os.Stat(filepath.Join(again.Spec.Local.Path, "written")); !os.IsNotExist(err) {
		t.Errorf("the claim provisioned again finds the archived data: %v", err)
	}
	again.Annotations[provisioner.AnnArchiveOnDelete] = "false"
	if err := p.Delete(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	// The archive removed by hand no longer takes room: at once on an
	// image; on btrfs once the cleaner has dropped the subvolume (a
	// commit wakes it), which may take seconds: up to a minute.
	if image {
		if err := os.Remove(archive); err != nil {
			t.Fatal(err)
		}
	} else if out, err := exec.Command("btrfs", "subvolume", "delete", archive).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume delete: %v: %s", err, out)
	}
	var n int64
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !image {
			_ = exec.Command("btrfs", "filesystem", "sync", root).Run()
		}
		if n = room(p); n >= archived+size-(1<<20) {
			return
		}
	}
	t.Errorf("room %d after the archive was removed, %d before; want about 20 MiB more", n, archived)
}

// readArchived reads the file written of an archive: in the subvolume,
// or in the image mounted read-only for the test.
func readArchived(t *testing.T, archive string, image bool) string {
	t.Helper()
	dir := archive
	if image {
		dir = t.TempDir()
		if out, err := exec.Command("mount", "-o", "loop,ro", archive, dir).CombinedOutput(); err != nil {
			t.Fatalf("mount the archived image: %v: %s", err, out)
		}
		defer func() {
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				t.Errorf("umount: %v: %s", err, out)
			}
		}()
	}
	b, err := os.ReadFile(filepath.Join(dir, "written"))
	if err != nil {
		t.Errorf("read the archive: %v", err)
	}
	return string(b)
}
