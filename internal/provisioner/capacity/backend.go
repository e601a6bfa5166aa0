package capacity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// Backend makes volumes of an enforced size under one root.
type Backend interface {
	// Kind names the backend: "btrfs" or "image". Callers record it with
	// a volume, so that a root moved to another file system is noticed.
	Kind() string
	// Create makes the volume name of size bytes and returns its
	// directory. Creating a volume that exists with that size returns it
	// again; with another size it fails (ErrExists).
	Create(ctx context.Context, name string, size int64) (string, error)
	// Expand grows the volume to size bytes online; the same size is
	// nothing to do, a smaller one is refused (ErrShrink).
	Expand(ctx context.Context, name string, size int64) error
	// Usage measures the volume.
	Usage(ctx context.Context, name string) (Usage, error)
	// Delete removes the volume and all it used; gone already is not an
	// error. The caller makes sure no pod uses it.
	Delete(ctx context.Context, name string) error
	// Recover finishes or rolls back what a crash interrupted, makes every
	// volume usable again, and returns them.
	Recover(ctx context.Context) ([]Volume, error)
	// Promised is, by volume, what the volumes may still take of the
	// root's file system: each one's size less what it already takes (a
	// volume being made: its whole size). A volume that cannot be
	// measured counts with its whole size. Volumes with nothing promised
	// are left out. Snapshots count too, each under SnapshotKey(name),
	// with what they may still take (see Snapshot.Bytes).
	Promised(ctx context.Context) (map[string]int64, error)
}

// BlockCreator is implemented by a Backend that can make raw block volumes:
// the image backend, whose image is attached to a loop device and never
// formatted or mounted, for claims of volumeMode Block. CreateBlock makes
// the volume name of size bytes (or finds it, as Create does) and returns
// its image: the stable path a PersistentVolume names, whose loop device
// is attached again at every start (Recover). Expand, Usage, Delete and
// Recover serve such volumes as any other.
type BlockCreator interface {
	CreateBlock(ctx context.Context, name string, size int64) (string, error)
}

// Usage is what a volume holds. Inode counts are 0 where the file system
// does not count inodes (btrfs).
type Usage struct {
	CapacityBytes, UsedBytes, AvailableBytes int64
	Inodes, InodesUsed, InodesFree           int64
}

// Volume is one volume found by Recover.
type Volume struct {
	Name string
	Path string // its directory, or the image of a block volume
	Size int64
	// Block: a raw block volume (see BlockCreator).
	Block bool
}

var (
	// ErrNotFound: the volume has no record.
	ErrNotFound = errors.New("no such volume")
	// ErrShrink: a volume's size can only grow.
	ErrShrink = errors.New("volumes only grow")
	// ErrExists: Create found the volume with another size.
	ErrExists = errors.New("volume exists with another size")
)

// Config configures Open.
type Config struct {
	// Root is the directory holding the volumes (required). It must exist.
	Root string
	// StateDir holds the records; default <Root>/.capacity. It must be on
	// storage that outlives a restart, as the root does.
	StateDir string
	// Logger is required.
	Logger *zap.Logger
	// Mounter mounts image volumes; default mount.System{}.
	Mounter mount.Mounter
	// EnableBtrfsQuota lets Open turn quotas on for a btrfs root where
	// they are off. Quotas are a file system wide setting with a cost (a
	// rescan, slower snapshot removal), so by default Open leaves them
	// off, and each creation is refused, saying how to turn them on, until
	// they are on (looked at again each time: no restart is needed).
	EnableBtrfsQuota bool
	// ForceImage uses images even on a btrfs root (for tests).
	ForceImage bool
	// Timeout bounds each external tool; default 2 minutes.
	Timeout time.Duration
	// VolumeMode is the mode of a volume's directory; default 0777 (the
	// pods of a claim may run as any UID, as with an emptyDir).
	VolumeMode os.FileMode
}

const defaultTimeout = 2 * time.Minute

// Open picks the backend for cfg.Root: btrfs when the root is on btrfs,
// images otherwise. It recovers nothing: call Recover before use.
func Open(ctx context.Context, cfg Config) (Backend, error) {
	if cfg.Root == "" || cfg.Logger == nil {
		return nil, errors.New("capacity: Root and Logger are required")
	}
	root, err := resolveRoot(cfg.Root)
	if err != nil {
		return nil, err
	}
	cfg.Root = root
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(root, ".capacity")
	}
	if cfg.Mounter == nil {
		cfg.Mounter = mount.System{}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.VolumeMode == 0 {
		cfg.VolumeMode = 0o777
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("make capacity state directory: %w", err)
	}
	if err := makeSnapshotDirs(cfg); err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("statfs local path root %s: %w", root, err)
	}
	var d driver
	if st.Type == unix.BTRFS_SUPER_MAGIC && !cfg.ForceImage {
		d, err = newBtrfs(ctx, cfg)
	} else {
		d = newImage(cfg)
	}
	if err != nil {
		return nil, err
	}
	return &store{cfg: cfg, d: d, log: cfg.Logger.Named("capacity").With(zap.String("backend", d.kind()))}, nil
}

// resolveRoot returns root absolute and without symlinks, checking it is
// a directory.
func resolveRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("local path root: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("local path root: %w", err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("local path root: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("local path root %s is not a directory", resolved)
	}
	return resolved, nil
}

// maxName leaves room under NAME_MAX (255) for ".img", ".json" and the
// record's temporary ".<name>.tmp".
const maxName = 250

// validName checks that name is one plain path element of ours.
func validName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("volume name %q is not a file name", name)
	case len(name) > maxName:
		return fmt.Errorf("volume name %q is longer than %d bytes", name, maxName)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("volume name %q holds a slash or a NUL", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("volume name %q starts with a dot", name)
	case strings.HasSuffix(name, ImageSuffix):
		return fmt.Errorf("volume name %q ends with %s", name, ImageSuffix)
	}
	return nil
}
