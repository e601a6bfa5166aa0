package capacity

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"
)

// ArchivePrefix starts the name of every archive: archived-<name>, as
// the local provisioner names an archived plain directory.
const ArchivePrefix = "archived-"

// maxArchives bounds the archives of one name: archived-<name>, then
// archived-<name>-2 up to -100.
const maxArchives = 100

// Archiver is implemented by a Backend that can keep a volume instead of
// removing it (a class's archiveOnDelete).
type Archiver interface {
	// Archive takes the volume name out of use (its image unmounted and
	// detached) and keeps it, with its data and its size, under the
	// name archived-<name> (-2, -3… when that is taken), and returns the
	// archive's path. The archive keeps its record: it counts in Promised
	// with all it may take until Delete removes it, or until it is found
	// removed by hand. A volume archived already returns its archive; no
	// volume and no archive of it is ErrNotFound. The caller makes sure
	// no pod uses it.
	Archive(ctx context.Context, name string) (string, error)
}

var _ Archiver = (*store)(nil)

// Archive: see Archiver. The step is written down first (archiving, with
// the archive's name), so that Recover finishes it after a crash.
func (s *store) Archive(ctx context.Context, name string) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	defer s.locks.Lock(name)()
	r, err := s.load(name)
	if errors.Is(err, ErrNotFound) {
		return s.archiveOf(name)
	}
	if err != nil {
		return "", err
	}
	switch r.State {
	case creating, deleting:
		return "", fmt.Errorf("archive volume %s: it is %s: %w", name, r.State, ErrNotFound)
	case archived:
		return "", fmt.Errorf("archive volume %s: it is an archive already (of %s)", name, r.From)
	case ready, expanding:
		if err := s.unused(ctx, r); err != nil {
			return "", fmt.Errorf("archive volume %s: %w", name, err)
		}
		if r.Archive, err = s.archiveName(name); err != nil {
			return "", err
		}
		r.State = archiving
		if err := s.journal().save(r); err != nil {
			return "", err
		}
	case archiving:
	default:
		return "", fmt.Errorf("record of volume %s has unknown state %q", name, r.State)
	}
	return s.finishArchive(ctx, r)
}

// finishArchive moves the volume of r, archiving, to its archive, writes
// the archive's record, then removes r's.
func (s *store) finishArchive(ctx context.Context, r *record) (string, error) {
	// Origin and Reflinked go with it: what a volume made from a
	// snapshot shares is counted by its source (see Promised).
	a := &record{Name: r.Archive, Backend: r.Backend, State: archived, Size: r.Size, ID: r.ID, Block: r.Block, From: r.Name,
		UID: r.UID, Origin: r.Origin, Reflinked: r.Reflinked}
	if err := validName(a.Name); err != nil {
		return "", fmt.Errorf("archive volume %s: %w", r.Name, err)
	}
	if err := s.d.archive(ctx, r, a); err != nil {
		return "", fmt.Errorf("archive volume %s as %s: %w", r.Name, a.Name, err)
	}
	if err := s.journal().save(a); err != nil {
		return "", err
	}
	if err := s.journal().remove(r.Name); err != nil {
		return "", err
	}
	s.log.Info("volume archived", zap.String("volume", r.Name), zap.String("archive", a.Name), zap.Int64("size", a.Size))
	return s.path(a), nil
}

// archiveName is the first name of archived-<name>, archived-<name>-2…
// that has neither a record nor files under the root. A name that would
// pass maxName loses bytes from its front: its end, the PV's name, stays.
func (s *store) archiveName(name string) (string, error) {
	for n := 1; n <= maxArchives; n++ {
		a := archiveName(name, n)
		_, err := s.journal().load(a)
		if !errors.Is(err, ErrNotFound) {
			if err != nil {
				return "", err
			}
			continue
		}
		found, err := s.d.exists(&record{Name: a})
		if err != nil {
			return "", err
		}
		if !found {
			return a, nil
		}
	}
	return "", fmt.Errorf("archive volume %s: %s%s up to -%d all exist", name, ArchivePrefix, name, maxArchives)
}

// archiveName is the n-th archive name of name.
func archiveName(name string, n int) string {
	suffix := ""
	if n > 1 {
		suffix = "-" + strconv.Itoa(n)
	}
	if over := len(ArchivePrefix) + len(name) + len(suffix) - maxName; over > 0 {
		name = name[over:]
	}
	return ArchivePrefix + name + suffix
}

// archiveOf returns the path of the archive whose record says it was the
// volume name (the latest, when it was archived more than once), or
// ErrNotFound.
func (s *store) archiveOf(name string) (string, error) {
	var found *record
	for n := 1; n <= maxArchives; n++ {
		a, err := s.journal().load(archiveName(name, n))
		if errors.Is(err, ErrNotFound) {
			continue // none, or removed by hand
		}
		if err != nil {
			return "", err
		}
		if a.State == archived && a.From == name {
			found = a
		}
	}
	if found == nil {
		return "", fmt.Errorf("archive volume %s: %w", name, ErrNotFound)
	}
	return s.path(found), nil
}

// recoverArchive forgets an archive found removed by hand (its files
// gone): it no longer takes room. It reports whether the archive is
// still there.
func (s *store) recoverArchive(r *record) (bool, error) {
	found, err := s.d.exists(r)
	if err != nil || found {
		return found, err
	}
	if err := s.journal().remove(r.Name); err != nil {
		return false, err
	}
	s.log.Info("archive removed by hand: no longer counted", zap.String("archive", r.Name), zap.String("volume", r.From))
	return false, nil
}
