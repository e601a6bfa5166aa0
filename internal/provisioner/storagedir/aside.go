package storagedir

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// AsidePrefix starts the name a released volume's directory has while it is
// pending deletion. It starts with a dot: provisioners refuse such names
// for volumes, so no claim's directory can ever be one.
const AsidePrefix = ".pending-delete-"

// ErrInUse says that a directory is shown by a mount elsewhere (a pod's
// bind mount of it): it is not moved, restored or removed.
var ErrInUse = errors.New("in use")

// AsideRel is where the volume directory rel of the PersistentVolume
// pvName is moved aside to: AsidePrefix and the PV name, in rel's parent,
// so that it stays on the same file system and the rename is atomic.
func AsideRel(rel, pvName string) string {
	return filepath.Join(filepath.Dir(rel), AsidePrefix+pvName)
}

// MoveAside renames base/rel to base/aside. When only base/aside exists
// an earlier call did it, and it returns nil; when neither exists the
// error wraps ErrGone; when both do, it refuses to choose.
func MoveAside(base, rel, aside string) error {
	return moveOnce(base, rel, aside)
}

// Restore renames base/aside back to base/rel, the reverse of MoveAside,
// with the same rules: done when only base/rel exists, ErrGone when
// neither does, an error when both do.
func Restore(base, rel, aside string) error {
	return moveOnce(base, aside, rel)
}

func moveOnce(base, from, to string) error {
	fromOK, err := Exists(base, from)
	if err != nil {
		return err
	}
	toOK, err := Exists(base, to)
	if err != nil {
		return err
	}
	switch {
	case fromOK && toOK:
		return fmt.Errorf("move %s to %s: both exist, refusing to choose between them", filepath.Join(base, from), to)
	case toOK:
		return nil
	case !fromOK:
		return fmt.Errorf("move %s to %s: %w", filepath.Join(base, from), to, ErrGone)
	}
	err = Move(base, from, to)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w (changed while it was moved)", err)
	}
	return err
}

// NotMounted fails, wrapping ErrInUse, when a mount elsewhere shows one of
// the directories base/rels or a directory below one (a pod's bind mount
// of the storage), or when something is mounted at or below one of them:
// storage that is mounted, or holds a mount, is neither moved nor deleted
// (moving it would move the mount with it). m tells the mounts below.
func NotMounted(ctx context.Context, m mount.Mounter, base string, rels ...string) error {
	var users []string
	for _, rel := range rels {
		dir := filepath.Join(base, rel)
		shown, err := mount.MountsOf(ctx, dir)
		if err != nil {
			return fmt.Errorf("find the mounts of %s: %w", dir, err)
		}
		users = append(users, shown...)
		ok, err := Exists(base, rel)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		below, err := m.MountsUnder(ctx, dir)
		if err != nil {
			return fmt.Errorf("find the mounts below %s: %w", dir, err)
		}
		users = append(users, below...)
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: mounted at %s", ErrInUse, strings.Join(users, ", "))
	}
	return nil
}

// ArchiveVolume archives the volume directory rel, from aside when it is
// there (see ArchiveAs), else from rel (see Archive), under rel's own name,
// and returns the archive's path.
func ArchiveVolume(base, rel, aside string) (string, error) {
	ok, err := Exists(base, aside)
	if err != nil {
		return "", err
	}
	if ok {
		return ArchiveAs(base, aside, filepath.Base(rel))
	}
	return Archive(base, rel)
}
