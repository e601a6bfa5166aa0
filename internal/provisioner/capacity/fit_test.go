package capacity

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nobody is the unprivileged user the fit tests write as.
const nobody = 65534

// TestImageHoldsItsSize: an image volume of every size from 4 KiB (no
// journal: mke2fs makes none under 2048 blocks) and 1 MiB to 10 GiB shows an unprivileged user at least its size free (statfs
// f_bavail × f_bsize), reports a capacity of at least its size, and
// Promised counts its whole image; for the sizes up to 100 MiB the user
// nobody writes the size in one file with dd. The images are sparse:
// 10 GiB takes little of the test's disk.
func TestImageHoldsItsSize(t *testing.T) {
	root := imageRoot(t)
	needTools(t, "dd", "setpriv")
	b, _ := open(t, Config{Root: root})
	for _, c := range []struct {
		size  int64
		write bool
	}{{4 << 10, false}, {1 * mi, true}, {2 * mi, true}, {10 * mi, true}, {50 * mi, true}, {100 * mi, true}, {1 << 30, false}, {10 << 30, false}} {
		name := "v" + strconv.FormatInt(c.size, 10)
		t.Run(name, func(t *testing.T) {
			dir, err := b.Create(t.Context(), name, c.size)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := b.Delete(context.Background(), name); err != nil {
					t.Error(err)
				}
			})
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				t.Fatal(err)
			}
			avail := int64(st.Bavail) * st.Bsize
			if avail < c.size {
				t.Errorf("a volume of %d bytes has %d bytes free for an unprivileged user, %d short", c.size, avail, c.size-avail)
			}
			img, err := fileSize(filepath.Join(root, name+ImageSuffix))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("size %d: image %d (+%.1f %%), free %d (+%d), blocks %d", c.size, img, float64(img-c.size)*100/float64(c.size), avail, avail-c.size, int64(st.Blocks)*st.Bsize)
			if p := promised(t, b)[name]; p > img || p < img-img/8 {
				t.Errorf("Promised of an empty volume with an image of %d bytes: %d, want nearly all the image", img, p)
			}
			u, err := b.Usage(t.Context(), name)
			if err != nil || u.CapacityBytes < c.size || u.AvailableBytes < c.size {
				t.Errorf("usage of a volume of %d bytes: %+v, %v; want capacity and available at least the size", c.size, u, err)
			}
			if c.write {
				ddAsNobody(t, dir, c.size)
			}
		})
	}
}

// ddAsNobody writes size bytes into the file data of dir as the user
// nobody, with dd and fsync, failing the test when the volume refuses
// them. dd starts in dir (the root above it is root's alone).
func ddAsNobody(t *testing.T, dir string, size int64) {
	t.Helper()
	path := filepath.Join(dir, "data")
	cmd := exec.Command("setpriv", "--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups",
		"dd", "if=/dev/urandom", "of=data", "bs=64K", fmt.Sprintf("count=%d", size/(64<<10)), "conv=fsync", "status=none")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		fi, _ := os.Stat(path)
		t.Fatalf("user nobody writing %d bytes with dd: %v: %s (file: %v)", size, err, strings.TrimSpace(string(out)), fi)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != size {
		t.Fatalf("after dd: %v, %v; want %d bytes", fi, err, size)
	}
}

// TestImageExpandHoldsItsSize: a 10 MiB volume (1 KiB blocks) found
// unmounted and expanded to 600 MiB, past what its first estimate of
// 4 KiB blocks covers, is grown until it holds 600 MiB (fit), keeps its
// data, and the user nobody writes 600 MiB into it.
func TestImageExpandHoldsItsSize(t *testing.T) {
	root := imageRoot(t)
	needTools(t, "dd", "setpriv")
	b, logs := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 10*mi)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, "umount", dir)
	if err := b.Expand(t.Context(), "vol", 600*mi); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || string(got) != "data" {
		t.Errorf("data after the expansion: %q, %v", got, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if avail := int64(st.Bavail) * st.Bsize; avail < 600*mi {
		t.Errorf("expanded to 600 MiB, the volume has %d bytes free for an unprivileged user, %d short", avail, 600*mi-avail)
	}
	t.Logf("rounds of growing: %d", logs.FilterMessage("image grown to hold its volume").Len())
	ddAsNobody(t, dir, 600*mi)
	if err := b.Delete(context.Background(), "vol"); err != nil {
		t.Fatal(err)
	}
	checkImageGone(t, root, "vol")
}

// TestImageRecoverGrowsAnOldImage: an image volume made by an older
// version (an image of its size, formatted with mkfs's defaults and -m 0)
// and found unmounted at start is grown until it holds its size, with its
// data; a second Recover changes nothing.
func TestImageRecoverGrowsAnOldImage(t *testing.T) {
	root := imageRoot(t)
	img := filepath.Join(root, "old"+ImageSuffix)
	sh(t, "truncate", "-s", "20M", img)
	sh(t, "mkfs.ext4", "-F", "-q", "-m", "0", "-E", "root_owner=0:0", img)
	mnt := t.TempDir()
	sh(t, "mount", "-o", "loop", img, mnt)
	if err := os.WriteFile(filepath.Join(mnt, "keep"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, "umount", mnt)
	j := journal{dir: filepath.Join(root, ".capacity")}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := j.save(&record{Name: "old", Backend: imageKind, State: ready, Size: 20 * mi}); err != nil {
		t.Fatal(err)
	}
	b, _ := open(t, Config{Root: root})
	for range 2 {
		if vols, err := b.Recover(t.Context()); err != nil || len(vols) != 1 {
			t.Fatalf("Recover: %+v, %v", vols, err)
		}
	}
	dir := filepath.Join(root, "old")
	if got, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || string(got) != "old" {
		t.Errorf("data after Recover: %q, %v", got, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if avail := int64(st.Bavail) * st.Bsize; avail < 20*mi {
		t.Errorf("an old 20 MiB volume after Recover has %d bytes free, %d short", avail, 20*mi-avail)
	}
	if devs := loopsOf(t, img); len(devs) != 1 {
		t.Errorf("loop devices %v, want one", devs)
	}
	if err := b.Delete(context.Background(), "old"); err != nil {
		t.Fatal(err)
	}
	checkImageGone(t, root, "old")
}
