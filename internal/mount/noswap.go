package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// NoSwapOption is the tmpfs option (Linux 6.4 and later) that keeps the
// file system's pages out of swap.
const NoSwapOption = "noswap"

// ErrNoSwapUnsupported is returned by ProbeNoSwap when the kernel refuses
// the noswap option of tmpfs (before Linux 6.4).
var ErrNoSwapUnsupported = errors.New("the kernel does not support the noswap option of tmpfs (Linux 6.4 or later needed)")

// Tmpfs returns a tmpfs mount with opts, and with noswap when noSwap is
// true (the caller has found that the kernel supports it).
func Tmpfs(noSwap bool, opts ...string) Mount {
	opts = slices.Clone(opts)
	if noSwap {
		opts = append(opts, NoSwapOption)
	}
	return Mount{Type: "tmpfs", Source: "tmpfs", Options: opts}
}

// ProbeNoSwap reports whether the kernel supports noswap for tmpfs, by
// mounting a tiny tmpfs with it on a fresh private directory below tmpDir
// ("" for the system's) and taking it off again: nil when it does,
// ErrNoSwapUnsupported when the kernel refuses the option, another error
// when the probe could not tell. The kernel refuses an option tmpfs does
// not know with EINVAL, so a probe answers where a kernel version would
// not (a backport, a distribution kernel).
func ProbeNoSwap(tmpDir string) error {
	dir, err := os.MkdirTemp(tmpDir, "volume-agent-noswap-probe-")
	if err != nil {
		return fmt.Errorf("probe tmpfs noswap: %w", err)
	}
	// A tmpfs asks no storage: its mount(2) cannot hang, and needs no
	// deadline.
	mountErr := mountByCall(Tmpfs(true, "size=4k", "mode=0700"), dir)
	if mountErr == nil {
		if err := unmountNew(dir); err != nil {
			// Never remove a directory that may still be a mount point:
			// the probe's directory is left behind, empty.
			return fmt.Errorf("probe tmpfs noswap: take the probe's tmpfs off %s: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("probe tmpfs noswap: %w", err)
	}
	switch {
	case mountErr == nil:
		return nil
	case errors.Is(mountErr, unix.EINVAL):
		return ErrNoSwapUnsupported
	default:
		return fmt.Errorf("probe tmpfs noswap: mount a tmpfs on %s: %w", dir, mountErr)
	}
}

// NoSwapUnder reads the kernel's mount table once and reports, for every
// tmpfs mounted at or below dir, whether it was mounted with noswap, by
// mount point. It is for rebuilding what is known about volumes mounted
// before a restart; a mount that is not a tmpfs is not listed.
func NoSwapUnder(ctx context.Context, dir string) (map[string]bool, error) {
	return Bounded(ctx, func() (map[string]bool, error) {
		infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		if err != nil {
			return nil, fmt.Errorf("read mount table: %w", err)
		}
		out := make(map[string]bool, len(infos))
		for _, info := range infos {
			if info.FSType == "tmpfs" {
				out[info.Mountpoint] = hasNoSwap(info.VFSOptions)
			}
		}
		return out, nil
	})
}

// hasNoSwap reports whether a tmpfs's super options (as the mount table
// shows them) hold noswap.
func hasNoSwap(superOptions string) bool {
	return slices.Contains(strings.Split(superOptions, ","), NoSwapOption)
}
