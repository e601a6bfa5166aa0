package subpath

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/mount"
)

// Prepared is the outcome of one wanted subPath mount.
type Prepared struct {
	Container string
	Index     int
	SubPath   string
	// Path is the mount the runtime uses, once prepared.
	Path string
	// Error says why it is not prepared.
	Error string
}

// Outcome is what the last preparation of a volume's subPaths did. It is
// never changed once made.
type Outcome struct{ Mounts []Prepared }

// Satisfied reports whether o prepared every mount of wants that has no
// Problem, without an error, and nothing else: whether a new preparation
// would change nothing.
func Satisfied(wants []Want, o *Outcome) bool {
	var n int
	for _, w := range wants {
		if w.Problem != "" {
			continue
		}
		n++
		if o == nil || !o.has(w) {
			return false
		}
	}
	return o == nil && n == 0 || o != nil && len(o.Mounts) == n
}

func (o *Outcome) has(w Want) bool {
	for _, m := range o.Mounts {
		if m.Container == w.Container && m.Index == w.Index && m.SubPath == w.Path && m.Error == "" {
			return true
		}
	}
	return false
}

// Preparer makes, checks and removes subPath mounts below a root.
type Preparer struct {
	Root layout.Root
	// Mounter tells mount points and unmounts (mount.System).
	Mounter mount.Mounter
	// HostRoot is where the host's root file system is visible to the
	// agent ("/" or "" on the host): the path of a volume outside Root
	// (a hostPath) is a host path, resolved below it.
	HostRoot string
	// Opener opens the subPaths, in checker processes (see Opener); nil
	// opens them in the agent's process, one Prepare call at a time
	// (tests).
	Opener *Opener
}

// Dir is <root>/pods/<uid>/volume-subpaths.
func (p Preparer) Dir(uid types.UID) string { return p.Root.SubPathsDir(uid) }

// Target is the mount of one subPath: Dir/<volume>/<container>/<index>.
func (p Preparer) Target(uid types.UID, volume, container string, index int) string {
	return filepath.Join(p.Dir(uid), volume, container, strconv.Itoa(index))
}

// Prepare makes the subPath mounts of the volume named volume in the
// pod's spec, whose content is at path, for every entry of wants without a
// Problem, and removes the mounts of that volume that wants no longer
// lists. A mount already in place that shows what the subPath names now
// is kept (a restart never remounts it); one that shows anything else is
// taken off and made again. The error joins the mounts' errors; each is
// in the Outcome too.
func (p Preparer) Prepare(ctx context.Context, uid types.UID, volume, path string, wants []Want) (*Outcome, error) {
	if err := layout.ValidName(volume); err != nil {
		return nil, fmt.Errorf("subPaths of volume %q: %w", volume, err)
	}
	var errs []error
	if err := p.removeUnwanted(ctx, uid, volume, wants); err != nil {
		errs = append(errs, err)
	}
	out := &Outcome{}
	opener := cmp.Or(p.Opener, &Opener{})
	var hung error // set once an open of this volume did not return
	for _, w := range wants {
		if w.Problem != "" {
			continue
		}
		m := Prepared{Container: w.Container, Index: w.Index, SubPath: w.Path, Path: p.Target(uid, volume, w.Container, w.Index)}
		err := hung
		if err == nil {
			err = p.prepare(ctx, opener, path, w, m.Path)
		}
		if err != nil {
			if hung == nil && errors.Is(err, errHung) {
				hung = fmt.Errorf("not tried: the volume's storage did not answer for subPath %q: %w", w.Path, err)
			}
			err = fmt.Errorf("subPath %q of volume %q for container %q (volumeMount %d): %w", w.Path, volume, w.Container, w.Index, mount.OneLine(err))
			m.Path, m.Error = "", err.Error()
			errs = append(errs, err)
		}
		out.Mounts = append(out.Mounts, m)
	}
	return out, errors.Join(errs...)
}

// prepare makes (or keeps) the mount of w's subPath of the volume at
// path on target, opening it with o.
func (p Preparer) prepare(ctx context.Context, o *Opener, path string, w Want, target string) error {
	if err := layout.ValidName(w.Container); err != nil {
		return fmt.Errorf("container name: %w", err)
	}
	src, err := o.open(ctx, p, path, w.Path)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	id, _, typ, err := idOf(src, "")
	if err != nil {
		return err
	}
	return p.bind(ctx, src, id, typ == unix.S_IFDIR, target)
}

// bind mounts src, whose file ID is id, on target, unless target shows
// it already.
func (p Preparer) bind(ctx context.Context, src int, id fileID, dir bool, target string) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	parent, err := unix.Open(filepath.Dir(target), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(target), Err: err}
	}
	defer unix.Close(parent)
	name := filepath.Base(target)
	_, parentMnt, _, err := idOf(parent, "")
	if err != nil {
		return err
	}
	have, mnt, typ, err := idOf(parent, name)
	switch {
	case err == nil && mnt != parentMnt && have == id:
		return nil // made before (a restart): kept
	case err == nil && mnt != parentMnt:
		// Showing something else (the subPath was replaced): taken off
		// and made again from what the subPath names now.
		if err := p.removeTarget(ctx, target); err != nil {
			return err
		}
	case err == nil && (typ == unix.S_IFDIR) != dir:
		if err := p.removeTarget(ctx, target); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, unix.ENOENT):
		return err
	}
	if err := makeTarget(parent, name, dir); err != nil {
		return err
	}
	if err := mount.BindFD(src, parent, name); err != nil {
		return err
	}
	return p.verify(ctx, parent, parentMnt, name, id, target)
}

// verify checks that the new mount on name shows the opened subPath; a
// mount that does not is taken off again.
func (p Preparer) verify(ctx context.Context, parent int, parentMnt uint64, name string, id fileID, target string) error {
	got, mnt, _, err := idOf(parent, name)
	if err == nil && mnt != parentMnt && got == id {
		return nil
	}
	undoCtx, cancel := mount.RollbackContext(ctx)
	defer cancel()
	if undo := p.removeTarget(undoCtx, target); undo != nil {
		return fmt.Errorf("the mount at %s does not show the opened subPath, and taking it off failed: %w", target, undo)
	}
	return fmt.Errorf("the mount at %s does not show the opened subPath (taken off again)", target)
}

// makeTarget makes the mount point: a directory for a directory, else
// an empty file.
func makeTarget(parent int, name string, dir bool) error {
	if dir {
		if err := unix.Mkdirat(parent, name, 0o750); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("make the mount point: %w", err)
		}
		return nil
	}
	fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return fmt.Errorf("make the mount point: %w", err)
	}
	return unix.Close(fd)
}
