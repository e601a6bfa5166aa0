package capacity

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// An image volume holds at least its size: its image is made larger than
// the size by what ext4 keeps for itself (its journal, inode tables and
// group descriptors, and the clusters it holds back from every user), so
// that statfs of the mounted volume shows an unprivileged user at least
// the size free. The image is first given an estimate of that (imageSize),
// then measured mounted and grown by the shortfall (fit).
const (
	// fitSlack is room the file system must have past the size: its root
	// directory and lost+found, and the extent blocks of one file as large
	// as the volume (a few KiB even for 10 GiB).
	fitSlack = 256 << 10
	// maxFitRounds bounds how often fit grows an image that measured
	// short of its size; the estimate is generous, so one round is rare.
	maxFitRounds = 4
	// smallImage: volumes below it get 1 KiB blocks and an inode per 4 KiB
	// (mke2fs's "small" type: less lost to partly filled blocks), larger
	// ones 4 KiB blocks and an inode per 16 KiB (its default).
	smallImage = 512 << 20
	// maxJournal: the journal is 1/128 of the volume up to this (mke2fs's
	// own largest default journal).
	maxJournal = 1 << 30
)

// ext4Params are the mkfs.ext4 parameters of a volume of a size.
type ext4Params struct {
	blockSize, inodeRatio int64
	journalMiB            int64
}

// paramsFor sizes a new volume's file system: -m 0 (no blocks kept for
// root: the claim's pods get them all), a journal proportionate to the
// volume (1/128 of it, at least the 1024 blocks ext4 allows, at most
// maxJournal), and the block size and inode ratio of mke2fs's types by
// size. Small volumes keep a journal too: the agent mounts a ready volume
// again after a crash without running e2fsck, which only a journal makes
// safe; the smallest costs 1 MiB of the image. Only below about 700 KiB,
// where the image has fewer than 2048 blocks, mke2fs makes none.
func paramsFor(size int64) ext4Params {
	p := ext4Params{blockSize: 4096, inodeRatio: 16384}
	if size < smallImage {
		p.blockSize, p.inodeRatio = 1024, 4096
	}
	minMiB := 1024 * p.blockSize >> 20
	p.journalMiB = min(max(size/128>>20, minMiB), maxJournal>>20)
	return p
}

// args are mkfs.ext4's options for p.
func (p ext4Params) args() []string {
	return []string{"-m", "0", "-b", strconv.FormatInt(p.blockSize, 10), "-i", strconv.FormatInt(p.inodeRatio, 10),
		"-I", "256", "-J", "size=" + strconv.FormatInt(p.journalMiB, 10)}
}

// overheadPerMille is, per mille of an image, what ext4 keeps of it
// besides its journal and its reserve (ext4Reserve): its inode tables
// (256 bytes per inode) and, measured with mkfs.ext4 1.47 from 3 MiB to
// 12 GiB, at most 22 ‰ with 1 KiB blocks and 4 ‰ with 4 KiB blocks for
// bitmaps and group descriptors, rounded up to 25 ‰ and 5 ‰.
func overheadPerMille(blockSize int64) int64 {
	if blockSize == 1024 {
		return 1000*256/4096 + 25
	}
	return 1000*256/16384 + 5
}

// imageUnit: images are sized in whole 64 KiB.
const imageUnit = 64 << 10

// imageSize estimates the image that holds a volume of size bytes with a
// file system of blockSize (0: the one a new volume gets): what its
// users may hold, its journal and its reserve, over what ext4 keeps of
// every block (overheadPerMille).
func imageSize(size, blockSize int64) int64 {
	p := paramsFor(size)
	if blockSize == 0 {
		blockSize = p.blockSize
	}
	need := size + fitSlack + p.journalMiB<<20
	keep := overheadPerMille(blockSize)
	img := need * 1000 / (1000 - keep - 20) // a reserve of 2 %
	if ext4Reserve(img, blockSize) == 4096*blockSize {
		img = (need + 4096*blockSize) * 1000 / (1000 - keep) // the reserve at its most
	}
	return (img + imageUnit - 1) / imageUnit * imageUnit
}

// ext4Reserve is what ext4 holds back from every user once a file system
// of imageBytes is mounted: 2 % of its clusters, at most 4096 (the
// kernel's s_resv_clusters, taken from statfs's f_bavail). It is counted
// even where statfs shows less: a file system grown online keeps the
// reserve of its old size until it is mounted again.
func ext4Reserve(imageBytes, blockSize int64) int64 {
	return min(imageBytes/blockSize/50, 4096) * blockSize
}

// usable is how many bytes unprivileged users can hold in the file
// system mounted on dir, whose image has imageBytes: its blocks (statfs
// leaves out what ext4 keeps for itself) less the reserve.
func usable(dir string, imageBytes int64) (measured, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return measured{}, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	bs := st.Bsize
	kept := max(int64(st.Bfree-st.Bavail)*bs, ext4Reserve(imageBytes, bs))  //nolint:gosec // G115: block counts of a volume fit in int64
	return measured{usable: int64(st.Blocks)*bs - kept, blockSize: bs}, nil //nolint:gosec // G115: as above
}

// measured is what usable found.
type measured struct{ usable, blockSize int64 }

// fileSize is the apparent size of the image.
func fileSize(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return st.Size, nil
}

// fit measures the mounted volume v and, while unprivileged users could
// hold less than v.Size plus fitSlack, grows its image by the shortfall
// (scaled by what ext4 keeps of it) and its file system: online, or
// offline when offline is set (the volume is being made or recovered, so
// no pod has it: it is unmounted, checked, grown and mounted again). At
// most maxFitRounds rounds.
func (d *imageDriver) fit(ctx context.Context, v *record, dev string, offline bool) error {
	img, dir := d.img(v), d.dir(v)
	want := v.Size + fitSlack
	for round := 0; ; round++ {
		size, err := fileSize(img)
		if err != nil {
			return err
		}
		m, err := mount.Bounded(ctx, func() (measured, error) { return usable(dir, size) })
		if err != nil {
			return err
		}
		if m.usable >= want {
			return nil
		}
		if round == maxFitRounds {
			return fmt.Errorf("image %s of %d bytes holds %d bytes for its volume after %d rounds of growing, want %d", img, size, m.usable, round, want)
		}
		grow := (want - m.usable) * 1000 / (1000 - overheadPerMille(m.blockSize) - 20)
		next := (size + grow + imageUnit - 1) / imageUnit * imageUnit
		if err := d.growFS(ctx, v, dev, next, offline); err != nil {
			return err
		}
		d.log.Debug("image grown to hold its volume", zap.String("volume", v.Name), zap.Int("round", round+1),
			zap.Int64("usable", m.usable), zap.Int64("want", want), zap.Int64("image", next))
	}
}

// growFS grows the image of v to size bytes, tells its loop device dev,
// and grows its file system: online, or offline (see fit).
func (d *imageDriver) growFS(ctx context.Context, v *record, dev string, size int64, offline bool) error {
	if err := growFile(d.img(v), size); err != nil {
		return err
	}
	if _, err := d.run.run(ctx, "losetup", "--set-capacity", dev); err != nil {
		return err
	}
	if !offline {
		return d.growOnline(ctx, d.dir(v), dev)
	}
	if err := d.unshared(ctx, v); err != nil {
		return err
	}
	if err := d.mounter.Unmount(ctx, d.dir(v)); err != nil {
		return err
	}
	return d.growOffline(ctx, v, dev)
}

// growOffline checks and grows the unmounted file system on dev to its
// device's size, and mounts it again.
func (d *imageDriver) growOffline(ctx context.Context, v *record, dev string) error {
	if err := d.check(ctx, dev); err != nil {
		return err
	}
	if _, err := d.run.run(ctx, "resize2fs", dev); err != nil {
		return err
	}
	return d.attach(ctx, v)
}

// unshared refuses to take offline a volume that a mount other than its
// own shows (a pod's bind mount).
func (d *imageDriver) unshared(ctx context.Context, v *record) error {
	users, err := mount.MountsOf(ctx, d.dir(v))
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("image volume %s is mounted at %s: it is grown to hold its size once it is found unmounted", v.Name, strings.Join(users, ", "))
	}
	return nil
}

// recover attaches v (thawing it first if a snapshot cut short left it
// frozen), and an image volume found unmounted (the node
// restarted; no pod has it yet) is grown until it holds its size (fit):
// an image made by an older version, which sized the image and not the
// file system, holds less.
func (d *imageDriver) recover(ctx context.Context, v *record) error {
	if v.Block {
		return d.attach(ctx, v)
	}
	mounted, err := d.mounter.IsMountPoint(ctx, d.dir(v))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if mounted {
		if err := d.thawVolume(v); err != nil {
			return err
		}
	}
	if err := d.attach(ctx, v); err != nil || mounted {
		return err
	}
	dev, err := d.loop(ctx, d.img(v))
	if err == nil {
		err = d.fit(ctx, v, dev, true)
	}
	if err != nil {
		// The volume is attached and usable, if smaller: better than
		// none. The next start finds it again.
		d.log.Warn("image volume not grown to hold its size", zap.String("volume", v.Name), zap.Int64("size", v.Size), zap.Error(err))
	}
	return nil
}
