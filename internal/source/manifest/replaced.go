package manifest

import (
	"time"

	"go.uber.org/zap"
)

// dirID identifies a directory: its device and inode numbers.
type dirID struct{ dev, ino uint64 }

// refresh forgets files that are gone and loads the others; first says
// that this is the first listing since start, replaced that the directory
// listed is another one than last time.
//
// A replaced directory (`mv m m.old; mkdir m; cp … m/`, or a symlink on the
// way swapped) may be read while it is filled, and "not there yet" is not
// "deleted": the files of the old directory are orphaned, and an orphan
// the new directory lacks goes only once a file of the new directory has
// objects and the orphan has been lacking for settleDelay. Meanwhile its
// objects stay in force, and another file of the new directory that
// defines one of them takes it over when the orphan goes (see merge). A new
// directory without objects is never believed, as a file without objects
// is not.
func (sc *scanner) refresh(entries []entry, first, replaced bool) {
	if replaced {
		for _, f := range sc.files {
			f.orphaned, f.missingSince = true, time.Time{}
		}
	}
	present := make(map[string]bool, len(entries))
	listed := false // a file of the directory has objects
	for _, e := range entries {
		present[e.name] = sc.load(e, first)
		listed = listed || (present[e.name] && sc.files[e.name].parsedOK())
	}
	now := sc.now()
	sc.orphans, sc.emptied = 0, false
	for name, f := range sc.files {
		if present[name] {
			f.orphaned = false
			continue
		}
		if f.orphaned && sc.keepOrphan(f, listed, now) {
			sc.orphans++
			continue
		}
		delete(sc.files, name)
		sc.fullNext = true
		sc.logger.Info("manifest file removed", zap.String("file", name))
	}
}

// keepOrphan reports whether an orphan that the new directory lacks stays
// for now; listed says whether a file of the new directory has objects.
func (sc *scanner) keepOrphan(f *fileState, listed bool, now time.Time) bool {
	if !listed {
		sc.emptied = true
		return true
	}
	if f.missingSince.IsZero() {
		f.missingSince = now
	}
	return now.Before(f.missingSince.Add(settleDelay))
}

// recheckOrphans makes the recheck come when an orphan is due to go.
func (sc *scanner) recheckOrphans() {
	for _, f := range sc.files {
		if !f.orphaned || f.missingSince.IsZero() {
			continue
		}
		if due := f.missingSince.Add(settleDelay); sc.recheck.IsZero() || due.Before(sc.recheck) {
			sc.recheck = due
		}
	}
}
