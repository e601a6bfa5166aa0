package capacity

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestImageLimit: a 10 MiB image volume refuses writes past its size
// with ENOSPC, reports its usage from statfs, and leaves nothing behind.
func TestImageLimit(t *testing.T) {
	root := imageRoot(t)
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 10*mi)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("volume directory: %v, %v; want mode 0777", fi, err)
	}
	if again, err := b.Create(t.Context(), "vol", 10*mi); err != nil || again != dir {
		t.Fatalf("create again: %q, %v", again, err)
	}
	devs := loopsOf(t, filepath.Join(root, "vol.img"))
	if len(devs) != 1 {
		t.Fatalf("loop devices of the image: %v, want one", devs)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.EXT4_SUPER_MAGIC || st.Type == unix.XFS_SUPER_MAGIC {
		if dio := strings.TrimSpace(sh(t, "losetup", "--list", "--noheadings", "--output", "DIO", devs[0])); dio != "1" {
			t.Errorf("loop device of an image on ext4 or XFS: direct I/O %q, want 1", dio)
		}
	}
	// The image is larger than the volume by what ext4 keeps for itself;
	// the new file system took a little of it.
	img, err := fileSize(filepath.Join(root, "vol.img"))
	if err != nil {
		t.Fatal(err)
	}
	if p := promised(t, b)["vol"]; p < 10*mi || p > img {
		t.Errorf("Promised of an empty 10 MiB volume of a %d-byte image: %d bytes, want 10 MiB to the image", img, p)
	}
	f := create(t, filepath.Join(dir, "data"))
	n, err := fill(f, 11)
	if !isErrno(err, unix.ENOSPC) {
		t.Fatalf("writing 11 MiB into 10 MiB: %d bytes, error %v; want ENOSPC", n, err)
	}
	if err := f.Sync(); err != nil { // through the loop device into the image
		t.Fatal(err)
	}
	if p := promised(t, b)["vol"]; p > img-n {
		t.Errorf("Promised of a full 10 MiB volume after %d bytes: %d bytes, want at most %d", n, p, img-n)
	}
	// The volume holds its size, and less than 1 MiB more.
	if n != 10*mi {
		t.Errorf("%d bytes written before ENOSPC, want 10 MiB", n)
	}
	u, err := b.Usage(t.Context(), "vol")
	if err != nil {
		t.Fatal(err)
	}
	if u.CapacityBytes < 10*mi || u.CapacityBytes > 11*mi || u.AvailableBytes > mi || u.UsedBytes < n || u.Inodes == 0 || u.InodesUsed == 0 {
		t.Errorf("usage of a full volume: %+v (wrote %d)", u, n)
	}
	f.Close()
	for range 2 {
		if err := b.Delete(t.Context(), "vol"); err != nil {
			t.Fatal(err)
		}
	}
	checkImageGone(t, root, "vol")
}

// TestImageExpandOnline: expanded to 20 MiB, the file still open in a
// full 10 MiB volume takes more, on the same mount.
func TestImageExpandOnline(t *testing.T) {
	root := imageRoot(t)
	if !capSysResource(t) {
		t.Skip("needs CAP_SYS_RESOURCE, which the kernel requires to grow a mounted ext4 (this process's bounding set lacks it); TestImageExpandNeedsCapSysResource covers the refusal")
	}
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 10*mi)
	if err != nil {
		t.Fatal(err)
	}
	before := mountID(t, dir)
	f := create(t, filepath.Join(dir, "data"))
	n, err := fill(f, 11)
	if !isErrno(err, unix.ENOSPC) {
		t.Fatalf("writing 11 MiB into 10 MiB: %d bytes, error %v; want ENOSPC", n, err)
	}
	if err := b.Expand(t.Context(), "vol", 20*mi); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(n, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fill(f, 8); err != nil {
		t.Fatalf("8 MiB more into the same open file after expanding to 20 MiB: %v", err)
	}
	if after := mountID(t, dir); after != before {
		t.Errorf("mount ID %d after expansion, was %d: remounted", after, before)
	}
	u, err := b.Usage(t.Context(), "vol")
	if err != nil {
		t.Fatal(err)
	}
	if u.CapacityBytes <= 15*mi || u.CapacityBytes > 20*mi {
		t.Errorf("capacity %d after expanding to 20 MiB", u.CapacityBytes)
	}
	if err := b.Expand(t.Context(), "vol", 10*mi); !errors.Is(err, ErrShrink) {
		t.Errorf("shrink: %v, want ErrShrink", err)
	}
	f.Close()
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
	checkImageGone(t, root, "vol")
}

// TestImageExpandNeedsCapSysResource: without the capability, growing a
// mounted volume fails saying so, and the volume stays mounted and usable.
func TestImageExpandNeedsCapSysResource(t *testing.T) {
	root := imageRoot(t)
	if capSysResource(t) {
		t.Skip("runs only without CAP_SYS_RESOURCE; TestImageExpandOnline covers the growth")
	}
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 10*mi)
	if err != nil {
		t.Fatal(err)
	}
	before := mountID(t, dir)
	err = b.Expand(t.Context(), "vol", 20*mi)
	if err == nil || !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
		t.Fatalf("expand without CAP_SYS_RESOURCE: %v", err)
	}
	if after := mountID(t, dir); after != before {
		t.Errorf("mount ID %d after the failed expansion, was %d", after, before)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		t.Errorf("write after the failed expansion: %v", err)
	}
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
	checkImageGone(t, root, "vol")
}

// TestImageExpandOffline: a volume found unmounted (the node restarted)
// is checked, grown and mounted again, its data kept.
func TestImageExpandOffline(t *testing.T) {
	root := imageRoot(t)
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 10*mi)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, "umount", dir)
	sh(t, "losetup", "-d", loopsOf(t, filepath.Join(root, "vol.img"))[0])
	if err := b.Expand(t.Context(), "vol", 20*mi); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || string(got) != "data" {
		t.Errorf("data after the offline expansion: %q, %v", got, err)
	}
	u, err := b.Usage(t.Context(), "vol")
	if err != nil || u.CapacityBytes <= 15*mi {
		t.Errorf("usage after expanding to 20 MiB: %+v, %v", u, err)
	}
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
	checkImageGone(t, root, "vol")
}

// capSysResource reports whether this process has CAP_SYS_RESOURCE.
func capSysResource(t *testing.T) bool {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// checkImageGone wants no image, no mount point, no loop device and no
// record of name.
func checkImageGone(t *testing.T, root, name string) {
	t.Helper()
	img := filepath.Join(root, name+ImageSuffix)
	if devs := loopsOf(t, img); len(devs) != 0 {
		t.Errorf("loop devices of %s remain: %v", name, devs)
	}
	for _, p := range []string{img, filepath.Join(root, name), filepath.Join(root, ".capacity", name+".json")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s remains: %v", p, err)
		}
	}
}

// TestImageRecoverNeverReformats: after crashes at each step, Recover
// re-attaches and remounts made volumes with their data, finishes an
// expansion, removes unfinished creations and deletions, and leaves
// exactly one loop device per image and none for a removed one.
func TestImageRecoverNeverReformats(t *testing.T) {
	root := imageRoot(t)
	b, _ := open(t, Config{Root: root})
	j := journal{dir: filepath.Join(root, ".capacity")}
	names := []string{"detached", "unmounted", "mounted", "expanding", "creating", "deleting"}
	for _, name := range names {
		dir, err := b.Create(t.Context(), name, 8*mi)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "keep"), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	unix.Sync()
	img := func(name string) string { return filepath.Join(root, name+ImageSuffix) }
	// The node restarted: nothing mounted or attached.
	sh(t, "umount", filepath.Join(root, "detached"))
	sh(t, "losetup", "-d", loopsOf(t, img("detached"))[0])
	// The agent was killed: the mount gone, the loop device left.
	sh(t, "umount", filepath.Join(root, "unmounted"))
	// The node restarted after an expansion was written down, before
	// anything grew.
	sh(t, "umount", filepath.Join(root, "expanding"))
	sh(t, "losetup", "-d", loopsOf(t, img("expanding"))[0])
	if err := j.save(&record{Name: "expanding", Backend: "image", State: expanding, Size: 16 * mi}); err != nil {
		t.Fatal(err)
	}
	// Killed in the middle of a creation and of a deletion.
	for _, s := range []state{creating, deleting} {
		if err := j.save(&record{Name: string(s), Backend: "image", State: s, Size: 8 * mi}); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, "umount", filepath.Join(root, "deleting"))

	b2, logs := open(t, Config{Root: root})
	vols, err := b2.Recover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 4 {
		t.Errorf("recovered %+v, want 4", vols)
	}
	for _, name := range names[:4] {
		got, err := os.ReadFile(filepath.Join(root, name, "keep"))
		if err != nil || !bytes.Equal(got, []byte(name)) {
			t.Errorf("%s after Recover: %q, %v; want the data written before (never reformatted)", name, got, err)
		}
		if devs := loopsOf(t, img(name)); len(devs) != 1 {
			t.Errorf("%s: loop devices %v, want one", name, devs)
		}
	}
	for _, name := range names[4:] {
		checkImageGone(t, root, name)
	}
	if n := logs.FilterMessage("unfinished volume removed").Len(); n != 2 {
		t.Errorf("%d logs of removed unfinished volumes, want 2", n)
	}
	if u, err := b2.Usage(t.Context(), "expanding"); err != nil || u.CapacityBytes <= 12*mi {
		t.Errorf("usage of the volume whose expansion Recover finished: %+v, %v", u, err)
	}
	// A second Recover finds all in place and changes nothing.
	if vols, err := b2.Recover(t.Context()); err != nil || len(vols) != 4 {
		t.Errorf("second Recover: %+v, %v", vols, err)
	}
	for _, name := range names[:4] {
		if devs := loopsOf(t, img(name)); len(devs) != 1 {
			t.Errorf("%s after a second Recover: loop devices %v", name, devs)
		}
		if err := b2.Delete(t.Context(), name); err != nil {
			t.Fatal(err)
		}
		checkImageGone(t, root, name)
	}
}

// TestImageLeavesForeignAlone: an image or directory under the root
// without a record is never formatted, taken over nor removed; an image
// that holds another file system is never formatted.
func TestImageLeavesForeignAlone(t *testing.T) {
	root := imageRoot(t)
	b, _ := open(t, Config{Root: root})
	theirs := filepath.Join(root, "theirs"+ImageSuffix)
	if err := os.WriteFile(theirs, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "plain"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"theirs", "plain"} {
		if _, err := b.Create(t.Context(), name, 4*mi); err == nil || !strings.Contains(err.Error(), "not made by volume-agent") {
			t.Errorf("create over %s: %v", name, err)
		}
		if err := b.Delete(t.Context(), name); err != nil {
			t.Errorf("delete %s (no record): %v", name, err)
		}
	}
	if got, err := os.ReadFile(theirs); err != nil || string(got) != "data" {
		t.Errorf("their image: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(root, "plain")); err != nil {
		t.Error(err)
	}
	// A recorded creation that finds a file system that is not ext4 on its
	// image (a crash cannot make one; a person can) refuses to format it.
	d := newImage(Config{Root: root, Timeout: defaultTimeout, VolumeMode: 0o777})
	xfs := &record{Name: "other", Size: 8 * mi}
	if err := growFile(d.img(xfs), xfs.Size); err != nil {
		t.Fatal(err)
	}
	sh(t, "mkfs.ext4", "-q", "-F", "-t", "ext2", d.img(xfs))
	if err := d.format(t.Context(), xfs); err == nil || !strings.Contains(err.Error(), `"ext2"`) {
		t.Errorf("format over ext2: %v", err)
	}
	if out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "TYPE", d.img(xfs)).Output(); strings.TrimSpace(string(out)) != "ext2" {
		t.Errorf("image holds %q after the refusal, want ext2", out)
	}
	// An image that holds ext4 already is left as it is.
	const uuid = "0d3f5c1e-7a4b-4c1d-9e2f-3a4b5c6d7e8f"
	sh(t, "mkfs.ext4", "-q", "-F", "-U", uuid, d.img(xfs))
	if err := d.format(t.Context(), xfs); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, "blkid", "-p", "-o", "value", "-s", "UUID", d.img(xfs)); strings.TrimSpace(out) != uuid {
		t.Errorf("image UUID %q after format, want %s: formatted again", out, uuid)
	}
}

// TestImageConcurrent: volumes made at once each get their own loop
// device; removed at once, none is left.
func TestImageConcurrent(t *testing.T) {
	root := imageRoot(t)
	b, _ := open(t, Config{Root: root})
	const n = 6
	name := func(i int) string { return "vol-" + strconv.Itoa(i) }
	all := func(op func(string) error) {
		errs := make(chan error, n)
		for i := range n {
			go func() { errs <- op(name(i)) }()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}
	all(func(v string) error { _, err := b.Create(t.Context(), v, 4*mi); return err })
	seen := map[string]bool{}
	for i := range n {
		devs := loopsOf(t, filepath.Join(root, name(i)+ImageSuffix))
		if len(devs) != 1 || seen[devs[0]] {
			t.Errorf("%s: loop devices %v (seen: %v)", name(i), devs, seen)
		}
		if len(devs) > 0 {
			seen[devs[0]] = true
		}
	}
	all(func(v string) error { return b.Delete(t.Context(), v) })
	for i := range n {
		checkImageGone(t, root, name(i))
	}
}
