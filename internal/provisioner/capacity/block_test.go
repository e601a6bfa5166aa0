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
)

// TestImageBlockVolume: a raw block volume is its image attached to one
// loop device of the volume's size, never formatted nor mounted: raw data
// without any signature survives a node restart (Recover attaches it
// again), an expansion grows the device, and Delete takes it all back.
func TestImageBlockVolume(t *testing.T) {
	root := imageRoot(t)
	b, _ := open(t, Config{Root: root})
	bc := b.(BlockCreator)
	img, err := bc.CreateBlock(t.Context(), "raw", 8*mi)
	if err != nil {
		t.Fatal(err)
	}
	if img != filepath.Join(root, "raw.img") {
		t.Fatalf("CreateBlock = %s, want the image", img)
	}
	if again, err := bc.CreateBlock(t.Context(), "raw", 8*mi); err != nil || again != img {
		t.Fatalf("create again: %q, %v", again, err)
	}
	if _, err := b.Create(t.Context(), "raw", 8*mi); !errors.Is(err, ErrExists) {
		t.Fatalf("Create of a block volume's name as a file system: %v, want ErrExists", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "raw")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a block volume has a directory: %v", err)
	}
	dev := oneLoop(t, img)
	if out, err := exec.Command("blkid", "-p", img).CombinedOutput(); err == nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("the block volume was formatted: %s, %v", out, err)
	}
	if size := deviceSize(t, dev); size != 8*mi {
		t.Fatalf("device size %d, want %d", size, 8*mi)
	}
	raw := bytes.Repeat([]byte{0x5a}, 4096)
	if err := os.WriteFile(dev, raw, 0); err != nil {
		t.Fatal(err)
	}

	// The node restarted: nothing attached.
	sh(t, "losetup", "-d", dev)
	b2, _ := open(t, Config{Root: root})
	vols, err := b2.Recover(t.Context())
	if err != nil || len(vols) != 1 || vols[0] != (Volume{Name: "raw", Path: img, Size: 8 * mi, Block: true}) {
		t.Fatalf("Recover = %+v, %v", vols, err)
	}
	dev = oneLoop(t, img)
	if got, err := os.ReadFile(dev); err != nil || !bytes.Equal(got[:4096], raw) {
		t.Fatalf("data after Recover: %v (never formatted, never mounted)", err)
	}
	if err := b2.Expand(t.Context(), "raw", 12*mi); err != nil {
		t.Fatal(err)
	}
	if size := deviceSize(t, oneLoop(t, img)); size != 12*mi {
		t.Fatalf("device size after expansion %d, want %d", size, 12*mi)
	}
	if u, err := b2.Usage(t.Context(), "raw"); err != nil || u.CapacityBytes != 12*mi || u.UsedBytes == 0 {
		t.Fatalf("usage: %+v, %v", u, err)
	}
	if err := b2.Delete(t.Context(), "raw"); err != nil {
		t.Fatal(err)
	}
	checkImageGone(t, root, "raw")
}

// A btrfs root makes no raw block volumes.
func TestBtrfsMakesNoBlockVolumes(t *testing.T) {
	b := &store{d: &btrfsDriver{}}
	if _, err := b.CreateBlock(t.Context(), "raw", mi); err == nil || !strings.Contains(err.Error(), "makes no raw block volumes") {
		t.Fatalf("CreateBlock on btrfs: %v", err)
	}
}

func oneLoop(t *testing.T, img string) string {
	t.Helper()
	devs := loopsOf(t, img)
	if len(devs) != 1 {
		t.Fatalf("loop devices of %s: %v, want one", img, devs)
	}
	return devs[0]
}

func deviceSize(t *testing.T, dev string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(sh(t, "blockdev", "--getsize64", dev)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A raw block volume whose loop device is published (bind-mounted, as a
// pod's device) is not deleted.
func TestImageBlockVolumePublishedIsKept(t *testing.T) {
	root := imageRoot(t)
	b, _ := open(t, Config{Root: root})
	img, err := b.(BlockCreator).CreateBlock(t.Context(), "raw", 4*mi)
	if err != nil {
		t.Fatal(err)
	}
	dev := oneLoop(t, img)
	pod := filepath.Join(t.TempDir(), "device")
	if err := os.WriteFile(pod, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, "mount", "--bind", dev, pod)
	if err := b.Delete(t.Context(), "raw"); err == nil || !strings.Contains(err.Error(), "is published at "+pod) {
		t.Fatalf("Delete of a published raw block volume = %v", err)
	}
	if oneLoop(t, img) != dev {
		t.Fatal("the loop device changed")
	}
	sh(t, "umount", pod)
	if err := b.Delete(t.Context(), "raw"); err != nil {
		t.Fatal(err)
	}
	checkImageGone(t, root, "raw")
}
