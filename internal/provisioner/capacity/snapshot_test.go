package capacity

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ext4Root makes a loop-backed ext4 of 1 GiB, mounted in a temporary
// directory: a root without reflinks, where image snapshots are sparse
// copies. The cleanup unmounts it (after imageRoot's cleanup of the
// volumes in it).
func ext4Root(t testing.TB) string {
	t.Helper()
	return ext4RootOf(t, "1G")
}

// ext4RootOf is ext4Root of size (truncate's units).
func ext4RootOf(t testing.TB, size string) string {
	t.Helper()
	needRoot(t)
	needTools(t, "mkfs.ext4", "losetup")
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	sh(t, "truncate", "-s", size, img)
	sh(t, "mkfs.ext4", "-q", img)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	sh(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		if err := exec.Command("umount", mnt).Run(); err != nil {
			_ = exec.Command("umount", "-l", mnt).Run()
		}
		for _, dev := range loopsOf(t, img) {
			_ = exec.Command("losetup", "-d", dev).Run()
		}
	})
	return mnt
}

// imageIn is an image root inside the file system mounted on mnt, whose
// volumes imageRoot's cleanup takes down.
func imageIn(t testing.TB, mnt string) string {
	t.Helper()
	root := filepath.Join(mnt, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		imgs, _ := filepath.Glob(filepath.Join(root, "*"+ImageSuffix))
		for _, img := range imgs {
			dir := strings.TrimSuffix(img, ImageSuffix)
			for unix.Unmount(dir, 0) == nil {
			}
			for _, dev := range loopsOf(t, img) {
				_ = exec.Command("losetup", "-d", dev).Run()
			}
		}
	})
	return root
}

// snapshotRoots are the three ways of taking snapshots: btrfs subvolume
// snapshots; images on a root with reflinks (btrfs), copied with FICLONE;
// images on ext4, sparse copies.
var snapshotRoots = []struct {
	name      string
	root      func(testing.TB) string
	image     bool
	reflinked bool
	full      unix.Errno // a write past the size
}{
	{"btrfs", func(t testing.TB) string { return btrfsRoot(t, true) }, false, false, unix.EDQUOT},
	{"image-reflink", func(t testing.TB) string { return imageIn(t, btrfsRoot(t, true)) }, true, true, unix.ENOSPC},
	{"image-sparse", func(t testing.TB) string { return imageIn(t, ext4Root(t)) }, true, false, unix.ENOSPC},
}

func snapshotter(t testing.TB, root string, image bool) (Backend, Snapshotter) {
	t.Helper()
	b, _ := open(t, Config{Root: root, ForceImage: image})
	return b, b.(Snapshotter)
}

func writeFile(t testing.TB, path string, n int) {
	t.Helper()
	f := create(t, path)
	if _, err := fill(f, n); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// sameContent wants the file at path to hold n MiB as fill writes them.
func sameContent(t testing.TB, path string, n int) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, mi)
	for i := range chunk {
		chunk[i] = byte(i*7 + 1)
	}
	if !bytes.Equal(got, bytes.Repeat(chunk, n)) {
		t.Fatalf("%s: %d bytes, not the %d MiB written", path, len(got), n)
	}
}

func absent(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: %v, want it absent", path, err)
	}
}

// TestSnapshotRestoreClone, on each root: what was written before a
// snapshot is in the volume restored from it, what was written after is
// not; a clone holds both; each call is idempotent and a same name of
// something else is ErrExists; a restore's and a clone's limits are
// enforced at their own sizes; the snapshot outlives its volume, and a
// volume of the same name made later is not its source; the snapshot
// counts in Promised and is listed again by a backend opened anew;
// deleting everything leaves nothing.
func TestSnapshotRestoreClone(t *testing.T) {
	for _, rc := range snapshotRoots {
		t.Run(rc.name, func(t *testing.T) {
			root := rc.root(t)
			b, s := snapshotter(t, root, rc.image)
			ctx := t.Context()
			dir, err := b.Create(ctx, "vol", 16*mi)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "before"), 4)
			unix.Sync()
			snap, err := s.Snapshot(ctx, "vol", "snap")
			if err != nil {
				t.Fatal(err)
			}
			if snap.Name != "snap" || snap.Source != "vol" || snap.Size != 16*mi || time.Since(snap.Created) > time.Minute || snap.Bytes < 4*mi || snap.Bytes > 24*mi {
				t.Fatalf("snapshot %+v", snap)
			}
			checkCopy(t, root, "snap", rc.image, rc.reflinked)
			if again, err := s.Snapshot(ctx, "vol", "snap"); err != nil || again != snap {
				t.Fatalf("snapshot again: %+v, %v; want %+v", again, err, snap)
			}
			if _, err := b.Create(ctx, "other", 16*mi); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Snapshot(ctx, "other", "snap"); !errors.Is(err, ErrExists) {
				t.Fatalf("snapshot of another volume under the same name: %v, want ErrExists", err)
			}
			if thawed, err := thawLeft(dir); rc.image && (err != nil || thawed) {
				t.Fatalf("the volume after its snapshot: frozen %t, %v", thawed, err)
			}
			writeFile(t, filepath.Join(dir, "after"), 2)

			restored, err := s.CreateFrom(ctx, "restored", 16*mi, Source{Snapshot: "snap"})
			if err != nil {
				t.Fatal(err)
			}
			sameContent(t, filepath.Join(restored, "before"), 4)
			absent(t, filepath.Join(restored, "after"))
			if again, err := s.CreateFrom(ctx, "restored", 16*mi, Source{Snapshot: "snap"}); err != nil || again != restored {
				t.Fatalf("restore again: %q, %v", again, err)
			}
			if _, err := s.CreateFrom(ctx, "restored", 16*mi, Source{Volume: "vol"}); !errors.Is(err, ErrExists) {
				t.Fatalf("restore under a name made from something else: %v, want ErrExists", err)
			}
			if _, err := s.CreateFrom(ctx, "other", 16*mi, Source{Snapshot: "snap"}); !errors.Is(err, ErrExists) {
				t.Fatalf("restore under the name of an empty volume: %v, want ErrExists", err)
			}
			if _, err := s.CreateFrom(ctx, "small", 8*mi, Source{Snapshot: "snap"}); !errors.Is(err, ErrShrink) {
				t.Fatalf("restore smaller than the snapshot's source: %v, want ErrShrink", err)
			}
			absent(t, filepath.Join(root, "small"))

			clone, err := s.CreateFrom(ctx, "clone", 24*mi, Source{Volume: "vol"})
			if err != nil {
				t.Fatal(err)
			}
			sameContent(t, filepath.Join(clone, "before"), 4)
			sameContent(t, filepath.Join(clone, "after"), 2)
			if again, err := s.CreateFrom(ctx, "clone", 24*mi, Source{Volume: "vol"}); err != nil || again != clone {
				t.Fatalf("clone again: %q, %v", again, err)
			}
			if _, err := s.CreateFrom(ctx, "clone", 32*mi, Source{Volume: "vol"}); !errors.Is(err, ErrExists) {
				t.Fatalf("clone again with another size: %v, want ErrExists", err)
			}
			if thawed, err := thawLeft(dir); rc.image && (err != nil || thawed) {
				t.Fatalf("the volume after its clone: frozen %t, %v", thawed, err)
			}
			if rc.image {
				if a, c := uuidOf(t, root, "vol"), uuidOf(t, root, "clone"); a == c || uuidOf(t, root, "restored") == a {
					t.Errorf("a clone's file system UUID %s is its source's %s", c, a)
				}
			}
			// The clone holds 24 MiB: 6 are taken, 18 more and no more fit.
			checkLimit(t, clone, 18, 24, rc.full)
			checkLimit(t, restored, 12, 16, rc.full)
			if u, err := b.Usage(ctx, "clone"); err != nil || u.CapacityBytes < 24*mi || u.CapacityBytes > 26*mi {
				t.Errorf("usage of the 24 MiB clone: %+v, %v", u, err)
			}

			unix.Sync() // qgroups count at a commit
			p := promised(t, b)
			// A restore shares the snapshot's 4 MiB, counted by the
			// snapshot: it may still take its whole size (a reflinked
			// image, all of its image); a sparse copy has its 4 MiB.
			switch n := p["restored"]; {
			case (rc.reflinked || !rc.image) && n < 15*mi:
				t.Errorf("Promised of a restore sharing its data: %d bytes, want its 16 MiB", n)
			case rc.image && !rc.reflinked && n > 13*mi:
				t.Errorf("Promised of a sparse restore holding 4 MiB: %d bytes, want about 12 MiB", n)
			}
			if n := p[SnapshotKey("snap")]; rc.reflinked || !rc.image {
				if n < 3*mi || n > snap.Bytes {
					t.Errorf("Promised of the snapshot: %d bytes, want about its %d bytes", n, snap.Bytes)
				}
			} else if n != 0 {
				t.Errorf("Promised of a sparse copy, which takes all it takes: %d bytes", n)
			}
			if _, ok := p["snap"]; ok {
				t.Error("the snapshot is in Promised under its bare name, a volume's")
			}

			// A backend opened anew (a restart) lists it.
			b2, s2 := snapshotter(t, root, rc.image)
			if _, err := b2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			list, err := s2.Snapshots(ctx)
			if err != nil || len(list) != 1 || list[0] != snap {
				t.Fatalf("snapshots after a restart: %+v, %v; want %+v", list, err, snap)
			}
			if info, err := s2.SnapshotInfo(ctx, "snap"); err != nil || info != snap {
				t.Fatalf("snapshot info: %+v, %v", info, err)
			}
			if _, err := s2.SnapshotInfo(ctx, "nothing"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("info of no snapshot: %v, want ErrNotFound", err)
			}

			// The snapshot outlives its volume; a volume made again
			// under the name is another volume.
			for _, n := range []string{"vol", "restored", "clone", "other"} {
				if err := b.Delete(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			again, err := s.CreateFrom(ctx, "again", 16*mi, Source{Snapshot: "snap"})
			if err != nil {
				t.Fatal(err)
			}
			sameContent(t, filepath.Join(again, "before"), 4)
			if _, err := b.Create(ctx, "vol", 16*mi); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Snapshot(ctx, "vol", "snap"); !errors.Is(err, ErrExists) {
				t.Fatalf("snapshot of a new volume under the old one's name and the old snapshot's: %v, want ErrExists", err)
			}
			for range 2 {
				if err := s.DeleteSnapshot(ctx, "snap"); err != nil {
					t.Fatal(err)
				}
			}
			// A snapshot taken again under the name is another one: the
			// volume made from the old one is not made from it.
			if _, err := s.Snapshot(ctx, "vol", "snap"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateFrom(ctx, "again", 16*mi, Source{Snapshot: "snap"}); !errors.Is(err, ErrExists) {
				t.Fatalf("restore under the name of a volume made from an older snapshot of the name: %v, want ErrExists", err)
			}
			if err := s.DeleteSnapshot(ctx, "snap"); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"vol", "again"} {
				if err := b.Delete(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			checkEmpty(t, root, rc.image)
		})
	}
}

// checkLimit fills dir's file "fill" past its free room: at least room-1
// MiB fit, the write fails with full, and in all the volume holds at most
// size MiB.
func checkLimit(t *testing.T, dir string, room, size int, full unix.Errno) {
	t.Helper()
	f := create(t, filepath.Join(dir, "fill"))
	n, err := fill(f, room+4)
	if !isErrno(err, full) {
		t.Fatalf("%s: %d bytes written past its size, error %v; want %v", dir, n, err, full)
	}
	if n < int64(room-1)*mi || n > int64(room+1)*mi {
		t.Errorf("%s: %d bytes written before %v, want about %d MiB", dir, n, full, room)
	}
	f.Close()
	if err := os.Remove(filepath.Join(dir, "fill")); err != nil {
		t.Fatal(err)
	}
}

// uuidOf is the ext4 UUID of the image volume name.
func uuidOf(t *testing.T, root, name string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "blkid", "-p", "-o", "value", "-s", "UUID", filepath.Join(root, name+ImageSuffix)))
}

// checkEmpty wants nothing under root but the state directory and the
// snapshots' directory, both empty of records and snapshots, and no
// subvolume or loop device.
func checkEmpty(t *testing.T, root string, image bool) {
	t.Helper()
	for dir, want := range map[string][]string{
		root:                             {".capacity", ".snapshots"},
		filepath.Join(root, ".capacity"): {"snapshots"},
		filepath.Join(root, ".capacity/snapshots"): nil,
		filepath.Join(root, ".snapshots"):          nil,
	} {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, de := range des {
			got = append(got, de.Name())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s holds %v, want %v", dir, got, want)
		}
	}
	if image {
		if out := sh(t, "losetup", "--list", "--noheadings", "--output", "BACK-FILE"); strings.Contains(out, root+"/") {
			t.Errorf("loop devices remain:\n%s", out)
		}
		return
	}
	if list := sh(t, "btrfs", "subvolume", "list", root); strings.TrimSpace(list) != "" {
		t.Errorf("subvolumes remain:\n%s", list)
	}
	for _, line := range strings.Split(sh(t, "btrfs", "qgroup", "show", "--raw", root), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "0/") && f[0] != "0/5" {
			t.Errorf("qgroup %s remains", f[0])
		}
	}
}

// checkCopy wants the record of the snapshot snap to say whether it is a
// reflink, and an image snapshot's copy to be sparse: it allocates what
// the volume's file system wrote, not the image's size.
func checkCopy(t *testing.T, root, snap string, image, reflinked bool) {
	t.Helper()
	r, err := journal{dir: filepath.Join(root, ".capacity", "snapshots")}.load(snap)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != snapshotKind || r.State != ready || r.Reflinked != reflinked {
		t.Errorf("record of snapshot %s: %+v, want a ready snapshot, reflinked %t", snap, r, reflinked)
	}
	if !image {
		return
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, ".snapshots", snap+ImageSuffix), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > st.Size/2 {
		t.Errorf("snapshot image of %d bytes allocates %d: not sparse", st.Size, st.Blocks*512)
	}
}

// TestDeleteSnapshotWhileRestoring: a snapshot is not deleted while a
// volume is being made from it (ErrSnapshotBusy), during the copy and
// after a crash left the restore's record, until Recover has rolled the
// restore back; the restore that was under way finishes with the data.
func TestDeleteSnapshotWhileRestoring(t *testing.T) {
	root := btrfsRoot(t, true)
	b, s := snapshotter(t, root, false)
	ctx := t.Context()
	dir, err := b.Create(ctx, "vol", 8*mi)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "data"), 1)
	if _, err := s.Snapshot(ctx, "vol", "snap"); err != nil {
		t.Fatal(err)
	}
	j := journal{dir: filepath.Join(root, ".capacity")}
	reached, release := make(chan struct{}), make(chan struct{})
	stepHook = func() {
		// Once the copy is made: the snapshot's lock is let go.
		if r, err := j.load("restore"); err == nil && r.State == creating && reached != nil && btrfsSubvolume(filepath.Join(root, "restore")) {
			close(reached)
			reached = nil
			<-release
		}
	}
	t.Cleanup(func() { stepHook = nil })
	wait := reached
	done := make(chan error, 1)
	go func() { _, err := s.CreateFrom(ctx, "restore", 8*mi, Source{Snapshot: "snap"}); done <- err }()
	<-wait
	if err := s.DeleteSnapshot(ctx, "snap"); !errors.Is(err, ErrSnapshotBusy) || !strings.Contains(err.Error(), "restore") {
		t.Fatalf("delete a snapshot a volume is being made from: %v, want ErrSnapshotBusy naming the volume", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stepHook = nil
	sameContent(t, filepath.Join(root, "restore", "data"), 1)

	// A crash left a restore's record (what CreateFrom writes first).
	if err := j.save(&record{Name: "cut", Backend: "btrfs", State: creating, Size: 8 * mi, Origin: &origin{Snapshot: "snap"}}); err != nil {
		t.Fatal(err)
	}
	b2, s2 := snapshotter(t, root, false)
	if err := s2.DeleteSnapshot(ctx, "snap"); !errors.Is(err, ErrSnapshotBusy) {
		t.Fatalf("delete a snapshot a crashed restore names: %v, want ErrSnapshotBusy", err)
	}
	if _, err := b2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := j.load("cut"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the crashed restore after Recover: %v, want it rolled back", err)
	}
	if err := s2.DeleteSnapshot(ctx, "snap"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"vol", "restore"} {
		if err := b2.Delete(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	checkEmpty(t, root, false)
}

// TestBtrfsCopyRefusedWithNestedSubvolumes: btrfs snapshots are not
// recursive, so a snapshot or a clone of a volume holding a subvolume a
// pod made would silently lack what that subvolume holds. Both are
// refused, saying why and what to do, and leave nothing; once the nested
// subvolume is gone they work.
func TestBtrfsCopyRefusedWithNestedSubvolumes(t *testing.T) {
	root := btrfsRoot(t, true)
	b, s := snapshotter(t, root, false)
	ctx := t.Context()
	dir, err := b.Create(ctx, "vol", 16*mi)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "top"), 1)
	sh(t, "btrfs", "subvolume", "create", filepath.Join(dir, "sub"))
	writeFile(t, filepath.Join(dir, "sub", "inner"), 1)
	_, err = s.Snapshot(ctx, "vol", "snap")
	t.Logf("refused: %v", err)
	if !errors.Is(err, ErrNestedSubvolumes) || !strings.Contains(err.Error(), "snapshot snap of volume vol") ||
		!strings.Contains(err.Error(), "1 found below "+dir) || !strings.Contains(err.Error(), "btrfs subvolume delete") {
		t.Errorf("snapshot of a volume holding a nested subvolume: %v; want ErrNestedSubvolumes naming the snapshot, the volume, how many and what to do", err)
	}
	if _, err := s.CreateFrom(ctx, "clone", 16*mi, Source{Volume: "vol"}); !errors.Is(err, ErrNestedSubvolumes) {
		t.Errorf("clone of a volume holding a nested subvolume: %v; want ErrNestedSubvolumes", err)
	}
	if snaps, err := s.Snapshots(ctx); err != nil || len(snaps) != 0 {
		t.Errorf("snapshots after the refusals: %v, %v; want none", snaps, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "clone")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused clone left %s: %v", filepath.Join(root, "clone"), err)
	}
	sh(t, "btrfs", "subvolume", "delete", filepath.Join(dir, "sub"))
	if _, err := s.Snapshot(ctx, "vol", "snap"); err != nil {
		t.Fatalf("snapshot once the nested subvolume is gone: %v", err)
	}
	restored, err := s.CreateFrom(ctx, "restored", 16*mi, Source{Snapshot: "snap"})
	if err != nil {
		t.Fatal(err)
	}
	sameContent(t, filepath.Join(restored, "top"), 1)
	for _, n := range []string{"vol", "restored"} {
		if err := b.Delete(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteSnapshot(ctx, "snap"); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, root, false)
}

// TestBlockVolumesHaveNoSnapshots: a raw block volume is neither
// snapshotted nor cloned (a pod may be writing the device, which the
// agent cannot freeze), and nothing is left of the attempt.
func TestBlockVolumesHaveNoSnapshots(t *testing.T) {
	root := imageRoot(t)
	b, s := snapshotter(t, root, true)
	ctx := t.Context()
	if _, err := b.(BlockCreator).CreateBlock(ctx, "dev", 4*mi); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "dev", "snap"); !errors.Is(err, ErrBlockSnapshot) {
		t.Fatalf("snapshot of a raw block volume: %v, want ErrBlockSnapshot", err)
	}
	if _, err := s.CreateFrom(ctx, "clone", 4*mi, Source{Volume: "dev"}); !errors.Is(err, ErrBlockSnapshot) {
		t.Fatalf("clone of a raw block volume: %v, want ErrBlockSnapshot", err)
	}
	if list, err := s.Snapshots(ctx); err != nil || len(list) != 0 {
		t.Fatalf("snapshots: %v, %v", list, err)
	}
	absent(t, filepath.Join(root, "clone"+ImageSuffix))
	if err := b.Delete(ctx, "dev"); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, root, true)
}

// TestFreezeIsBounded: a file system frozen for a snapshot is thawed at
// the bound even while the copy goes on, and the copy is then refused
// (errThawedEarly); thawLeft finds it thawed.
func TestFreezeIsBounded(t *testing.T) {
	root := imageRoot(t)
	b, _ := snapshotter(t, root, true)
	dir, err := b.Create(t.Context(), "vol", 4*mi)
	if err != nil {
		t.Fatal(err)
	}
	dev := loopsOf(t, filepath.Join(root, "vol.img"))[0]
	// The bound also covers FIFREEZE's wait for the writes under way, which
	// a busy machine can stretch past a short bound (the freeze then fails
	// and nothing stays frozen): start short and lengthen it. What is
	// tested here is the thaw, at the bound, of a freeze that succeeded.
	unix.Sync()
	var f *freezer
	for bound := 100 * time.Millisecond; ; bound *= 4 {
		f, err = freeze(t.Context(), dir, dev, bound)
		if err == nil {
			break
		}
		// EBUSY: the late freeze of the last try, not thawed yet.
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, unix.EBUSY) || bound >= 6*time.Second {
			t.Fatal(err)
		}
		t.Logf("freeze within %s: %v; trying a longer bound", bound, err)
		time.Sleep(bound) // a freeze that lands late is thawed meanwhile
	}
	for {
		f.mu.Lock()
		expired := f.expired
		f.mu.Unlock()
		if expired {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatal("never thawed")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := f.thaw(); !errors.Is(err, errThawedEarly) {
		t.Fatalf("thaw after the bound: %v, want errThawedEarly", err)
	}
	if thawed, err := thawLeft(dir); err != nil || thawed {
		t.Fatalf("after the bound: frozen %t, %v", thawed, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := freeze(t.Context(), root, dev, time.Second); err == nil || !strings.Contains(err.Error(), "not the root") {
		t.Fatalf("freeze of what is not the volume's root: %v", err)
	}
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
}

func btrfsSubvolume(dir string) bool {
	var st unix.Stat_t
	return unix.Lstat(dir, &st) == nil && st.Ino == 256
}

// TestSnapshotErrorsSayWhat: a snapshot that does not exist, asked for or
// restored from, is ErrNotFound with a message naming the snapshot (not
// ErrNotFound's own about volumes); a volume that does not exist is
// ErrNotFound for Snapshot and for a clone; nothing is made.
func TestSnapshotErrorsSayWhat(t *testing.T) {
	root := imageRoot(t)
	_, s := snapshotter(t, root, true)
	ctx := t.Context()
	for _, err := range []error{
		func() error { _, err := s.SnapshotInfo(ctx, "gone"); return err }(),
		func() error { _, err := s.CreateFrom(ctx, "vol", mi, Source{Snapshot: "gone"}); return err }(),
	} {
		if !errors.Is(err, ErrNotFound) || err.Error() != "no snapshot gone" && !strings.HasSuffix(err.Error(), ": no snapshot gone") {
			t.Errorf("%v: want ErrNotFound saying no snapshot gone", err)
		}
	}
	if _, err := s.Snapshot(ctx, "gone", "snap"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "volume gone") {
		t.Errorf("snapshot of no volume: %v", err)
	}
	if _, err := s.CreateFrom(ctx, "vol", mi, Source{Volume: "gone"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "volume gone") {
		t.Errorf("clone of no volume: %v", err)
	}
	checkEmpty(t, root, true)
}
