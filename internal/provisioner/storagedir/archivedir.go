package storagedir

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ArchiveDir is the directory, directly below base, that ArchiveInto
// moves archives into. It is a dot-name, which no pathPattern may name,
// so that no claim's volume can ever be it, hold it or be inside it:
// an archive next to the volume it came from (where Archive puts it) is
// in a directory a claim may be given.
const ArchiveDir = ".archived"

// archiveDirMode keeps the archives from the export's other users: only
// the owner (the agent, or the user root is squashed to) may list or
// enter ArchiveDir.
const archiveDirMode = 0o700

// ArchiveInto archives the volume directory rel, or its aside directory
// when that is where it is (see MoveAside), by renaming it to
// base/ArchiveDir/archived-<name>, never overwriting: when that exists it
// tries archived-<name>-2, -3 and so on, as Archive does. name is one
// component saying whose volume it was. ArchiveDir is made (mode 0700) when
// missing. It returns the archive's path.
//
// When neither rel nor aside exists, the archive an earlier call made is
// returned: the one in ArchiveDir with the highest suffix, else one an
// older version made next to rel (archived-<rel's last component>, see
// Archive), so that a deletion an upgrade interrupted is found done. When
// there is none either the error wraps ErrGone.
func ArchiveInto(base, rel, aside, name string) (string, error) {
	for _, r := range []string{rel, aside} {
		if err := ValidRel(r); err != nil {
			return "", fmt.Errorf("archive a directory in %s: %w", base, err)
		}
	}
	if err := ValidRel(name); err != nil || strings.Contains(name, "/") {
		return "", fmt.Errorf("archive %s as %q: want a single name", rel, name)
	}
	from := rel
	ok, err := Exists(base, aside)
	if err != nil {
		return "", err
	}
	if ok {
		from = aside
	}
	parent, last, err := openParent(base, from)
	if errors.Is(err, unix.ENOENT) && !errors.Is(err, errBase) {
		return "", fmt.Errorf("archive %s: %w", filepath.Join(base, rel), ErrGone)
	}
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", rel, err)
	}
	defer unix.Close(parent)
	a := archival{base: base, rel: rel, name: name}
	st, err := lstatAt(parent, last)
	switch {
	case errors.Is(err, unix.ENOENT):
		return a.earlier(parent)
	case err != nil:
		return "", fmt.Errorf("archive %s: %w", rel, pathError("stat", filepath.Join(base, from), err))
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return "", fmt.Errorf("archive %s: %w", rel, errNotDir(filepath.Join(base, from), st))
	}
	return a.move(parent, last)
}

// archival is one ArchiveInto call.
type archival struct {
	base, rel, name string
}

// move renames from, in the directory parent, into ArchiveDir under the
// first free archive name.
func (a archival) move(parent int, from string) (string, error) {
	dir, err := openArchiveDir(a.base, true)
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", a.rel, err)
	}
	defer unix.Close(dir)
	for n := 1; n <= maxArchives; n++ {
		archived := archiveName(a.name, n)
		err := renameNoReplaceAt(parent, from, dir, archived)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err == nil {
			err = errors.Join(unix.Fsync(parent), unix.Fsync(dir))
		}
		if err != nil {
			return "", fmt.Errorf("archive %s: %w", a.rel, pathError("rename", filepath.Join(a.base, a.rel), fmt.Errorf("to %s/%s: %w", ArchiveDir, archived, err)))
		}
		return filepath.Join(a.base, ArchiveDir, archived), nil
	}
	return "", fmt.Errorf("%s: %s/archived-%s up to -%d all exist", filepath.Join(a.base, a.rel), ArchiveDir, a.name, maxArchives)
}

// earlier finds the archive an earlier call made of a volume that is no
// longer in place: in ArchiveDir, else next to rel (parent is rel's
// parent), as an older version archived.
func (a archival) earlier(parent int) (string, error) {
	path := filepath.Join(a.base, a.rel)
	dir, err := openArchiveDir(a.base, false)
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", a.rel, err)
	}
	if dir >= 0 {
		defer unix.Close(dir)
		found, err := lastArchive(dir, a.name, path)
		if err == nil {
			return filepath.Join(a.base, ArchiveDir, found), nil
		}
		if !errors.Is(err, ErrGone) {
			return "", fmt.Errorf("archive %s: %w", a.rel, err)
		}
	}
	found, err := lastArchive(parent, filepath.Base(a.rel), path)
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", a.rel, err)
	}
	return filepath.Join(filepath.Dir(path), found), nil
}

// openArchiveDir opens base/ArchiveDir, resolved beneath base; when it is
// missing, create says whether to make it (durably) or to return -1.
func openArchiveDir(base string, create bool) (int, error) {
	fd, err := openBase(base)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	path := filepath.Join(base, ArchiveDir)
	created := false
	if create {
		err := unix.Mkdirat(fd, ArchiveDir, archiveDirMode)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, pathError("mkdir", path, err)
		}
		created = err == nil
	}
	dir, err := openBelow(fd, ArchiveDir)
	switch {
	case errors.Is(err, unix.ENOENT) && !create:
		return -1, nil
	case err != nil:
		return -1, pathError("open", path, err)
	}
	if created {
		if err := errors.Join(chmodIfNeeded(dir, archiveDirMode), unix.Fsync(fd)); err != nil {
			unix.Close(dir)
			return -1, pathError("set up", path, err)
		}
	}
	return dir, nil
}
