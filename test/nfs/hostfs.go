package nfstest

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	billy "github.com/go-git/go-billy/v5"
	"golang.org/x/sys/unix"
)

// hostFS is a directory of the host as go-nfs serves it, with POSIX
// meaning: the last element of a path is never followed if it is a
// symbolic link (removing or renaming a link acts on the link), link
// targets are stored as given, and nothing is created that was not asked
// for. Symbolic links met earlier in a path are resolved inside root, so
// that no path leaves it.
//
// go-billy's osfs does not do for this: BoundOS follows a link given to
// Remove or Rename and acts on its target; ChrootOS rewrites absolute link
// targets and creates missing parent directories.
type hostFS struct {
	root string
}

var (
	_ billy.Filesystem = hostFS{}
	_ billy.Change     = hostFS{}
)

// path returns the host path of name, which go-nfs gives relative to the
// root or, at times (a file's Name), already on the host.
func (f hostFS) path(name string) (string, error) {
	if name == f.root || strings.HasPrefix(name, f.root+"/") {
		name = strings.TrimPrefix(name, f.root)
	}
	dir, base := filepath.Split(filepath.Clean("/" + name))
	parent, err := securejoin.SecureJoin(f.root, dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, base), nil
}

func (f hostFS) Create(name string) (billy.File, error) {
	return f.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

func (f hostFS) Open(name string) (billy.File, error) { return f.OpenFile(name, os.O_RDONLY, 0) }

func (f hostFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	fd, err := os.OpenFile(p, flag, perm)
	if err != nil {
		return nil, err
	}
	return hostFile{fd}, nil
}

func (f hostFS) Stat(name string) (os.FileInfo, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	return os.Stat(p)
}

func (f hostFS) Lstat(name string) (os.FileInfo, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	return os.Lstat(p)
}

func (f hostFS) Rename(from, to string) error {
	pf, err := f.path(from)
	if err != nil {
		return err
	}
	pt, err := f.path(to)
	if err != nil {
		return err
	}
	// rename(2), as a Linux NFS server does: it replaces an empty
	// directory, which os.Rename refuses (EEXIST) before asking the kernel.
	if err := unix.Rename(pf, pt); err != nil {
		return &os.LinkError{Op: "rename", Old: pf, New: pt, Err: err}
	}
	return nil
}

func (f hostFS) Remove(name string) error { return f.do(name, os.Remove) }

func (f hostFS) Join(elem ...string) string { return filepath.Join(elem...) }

func (f hostFS) TempFile(dir, prefix string) (billy.File, error) {
	p, err := f.path(dir)
	if err != nil {
		return nil, err
	}
	fd, err := os.CreateTemp(p, prefix)
	if err != nil {
		return nil, err
	}
	return hostFile{fd}, nil
}

// ReadDir lists a directory sorted by name, as go-nfs expects.
func (f hostFS) ReadDir(name string) ([]os.FileInfo, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	infos := make([]os.FileInfo, 0, len(entries))
	for _, e := range entries {
		if info, err := e.Info(); err == nil { // gone meanwhile: skipped
			infos = append(infos, info)
		}
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name() < infos[j].Name() })
	return infos, nil
}

func (f hostFS) MkdirAll(name string, perm os.FileMode) error {
	return f.do(name, func(p string) error { return os.MkdirAll(p, perm) })
}

func (f hostFS) Symlink(target, link string) error {
	return f.do(link, func(p string) error { return os.Symlink(target, p) })
}

func (f hostFS) Readlink(link string) (string, error) {
	p, err := f.path(link)
	if err != nil {
		return "", err
	}
	return os.Readlink(p)
}

func (f hostFS) Chroot(name string) (billy.Filesystem, error) {
	p, err := f.path(name)
	if err != nil {
		return nil, err
	}
	return hostFS{root: p}, nil
}

func (f hostFS) Root() string { return f.root }

func (f hostFS) Chmod(name string, mode os.FileMode) error {
	return f.do(name, func(p string) error { return os.Chmod(p, mode) })
}

func (f hostFS) Lchown(name string, uid, gid int) error {
	return f.do(name, func(p string) error { return os.Lchown(p, uid, gid) })
}

func (f hostFS) Chown(name string, uid, gid int) error {
	return f.do(name, func(p string) error { return os.Chown(p, uid, gid) })
}

func (f hostFS) Chtimes(name string, atime, mtime time.Time) error {
	return f.do(name, func(p string) error { return os.Chtimes(p, atime, mtime) })
}

// do runs op on the host path of name.
func (f hostFS) do(name string, op func(path string) error) error {
	p, err := f.path(name)
	if err != nil {
		return err
	}
	return op(p)
}

// hostFile is an open file of a hostFS.
type hostFile struct {
	*os.File
}

func (h hostFile) Lock() error   { return syscall.Flock(int(h.Fd()), syscall.LOCK_EX) }
func (h hostFile) Unlock() error { return syscall.Flock(int(h.Fd()), syscall.LOCK_UN) }
