package storagedir

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrGone says that neither the directory to archive nor an archive of it
// exists: a caller deleting storage treats it as already gone. A missing
// base is a different error (the disk or export may just not be mounted).
var ErrGone = errors.New("neither the directory nor an archive of it exists")

// maxArchives bounds the suffixes Archive tries for one name.
const maxArchives = 1000

// Archive renames the directory base/rel to archived-<name> in the same
// parent (name is rel's last component) and returns the new path. It
// never overwrites: when archived-<name> exists it tries
// archived-<name>-2, -3, and so on. When base/rel is missing but an
// archive of it exists, that archive (the one with the highest suffix,
// counting up from archived-<name> to the first missing) is returned: an
// earlier call archived it. When neither exists the error wraps ErrGone. A file or a
// symlink at base/rel is an error and is left as it is.
func Archive(base, rel string) (string, error) {
	return ArchiveAs(base, rel, filepath.Base(rel))
}

// ArchiveAs is Archive with the archive named after name instead of rel's
// last component: for a directory moved aside under another name, archived
// under its own.
func ArchiveAs(base, rel, name string) (string, error) {
	if err := ValidRel(rel); err != nil {
		return "", fmt.Errorf("archive a directory in %s: %w", base, err)
	}
	if err := ValidRel(name); err != nil || strings.Contains(name, "/") {
		return "", fmt.Errorf("archive %s as %q: want a single name", rel, name)
	}
	path := filepath.Join(base, rel)
	parent, from, err := openParent(base, rel)
	if errors.Is(err, unix.ENOENT) && !errors.Is(err, errBase) {
		return "", fmt.Errorf("archive %s: %w", path, ErrGone)
	}
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", rel, err)
	}
	defer unix.Close(parent)
	archived, err := archiveAt(parent, from, name, path)
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", rel, err)
	}
	return filepath.Join(filepath.Dir(path), archived), nil
}

// archiveAt renames the directory from in parent to the first free
// archive name of name, or finds the archive an earlier call made. path is
// for errors.
func archiveAt(parent int, from, name, path string) (string, error) {
	st, err := lstatAt(parent, from)
	switch {
	case errors.Is(err, unix.ENOENT):
		return lastArchive(parent, name, path)
	case err != nil:
		return "", pathError("stat", path, err)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return "", errNotDir(path, st)
	}
	for n := 1; n <= maxArchives; n++ {
		archived := archiveName(name, n)
		err := renameNoReplace(parent, from, archived)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err == nil {
			err = unix.Fsync(parent)
		}
		if err != nil {
			return "", pathError("rename", path, fmt.Errorf("to %s: %w", archived, err))
		}
		return archived, nil
	}
	return "", fmt.Errorf("%s: archived-%s up to -%d all exist", path, name, maxArchives)
}

// lastArchive returns the archive of name with the highest suffix,
// counting from archived-<name> up to the first that is missing. It wraps
// ErrGone when there is none.
func lastArchive(parent int, name, path string) (string, error) {
	found := ""
	for n := 1; n <= maxArchives; n++ {
		_, err := lstatAt(parent, archiveName(name, n))
		if errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return "", pathError("stat", path, err)
		}
		found = archiveName(name, n)
	}
	if found == "" {
		return "", fmt.Errorf("%s: %w", path, ErrGone)
	}
	return found, nil
}

// ArchivePrefix starts the name of every archive Archive makes.
const ArchivePrefix = "archived-"

// nameMax is NAME_MAX, the longest name a directory entry may have.
const nameMax = 255

// archiveName is the n-th archive name of name: archived-<name>, then
// archived-<name>-2 and so on. A name that would pass NAME_MAX loses bytes
// from its front, so that its end (the PV's name, which is unique) stays
// and the rename cannot fail with ENAMETOOLONG at every retry.
func archiveName(name string, n int) string {
	suffix := ""
	if n > 1 {
		suffix = fmt.Sprintf("-%d", n)
	}
	if over := len(ArchivePrefix) + len(name) + len(suffix) - nameMax; over > 0 {
		name = name[over:]
	}
	return ArchivePrefix + name + suffix
}

// renameat2 is unix.Renameat2; tests replace it to answer as file systems
// this machine does not have answer.
var renameat2 = unix.Renameat2

// renameNoReplace renames old to new in dirfd, failing with EEXIST when
// new exists. File systems without RENAME_NOREPLACE get
// renameOverReservation: NFS answers EINVAL, some FUSE file systems
// EOPNOTSUPP (which is ENOTSUP on Linux), and a kernel without renameat2
// ENOSYS. Retrying the flag on such a file system would fail forever, and
// the PV would never be deleted.
func renameNoReplace(dirfd int, old, new string) error {
	return renameNoReplaceAt(dirfd, old, dirfd, new)
}

// renameNoReplaceAt is renameNoReplace from one directory to another (of
// the same file system).
func renameNoReplaceAt(olddirfd int, old string, newdirfd int, new string) error {
	err := renameat2(olddirfd, old, newdirfd, new, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return renameOverReservation(olddirfd, old, newdirfd, new)
	}
	return err
}

// renameOverReservation renames the directory old to new without
// overwriting anything but an empty directory of its own: it reserves new
// with mkdir, which fails with EEXIST when new exists, then renames old
// over the empty reservation (rename(2) replaces an empty directory).
// The reservation is removed when the rename fails.
func renameOverReservation(olddirfd int, old string, newdirfd int, new string) error {
	if err := unix.Mkdirat(newdirfd, new, 0o700); err != nil {
		return err
	}
	if err := unix.Renameat(olddirfd, old, newdirfd, new); err != nil {
		_ = unix.Unlinkat(newdirfd, new, unix.AT_REMOVEDIR) // best effort: the rename's error is what matters
		return err
	}
	return nil
}
