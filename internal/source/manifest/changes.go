package manifest

import (
	"maps"
	"slices"

	"golang.org/x/sys/unix"
)

// changes gathers what the directory's events say must be read again, and
// when.
//
// A manifest renamed into the directory (IN_MOVED_TO) is complete when it
// appears: it was written under another name and moved in with one
// rename(2), the way kubectl-style tools, `sed -i`, `mv` and the examples
// write. It is read at once.
//
// Everything else waits until the directory has been quiet for the
// debounce delay, as every event did before:
//   - A file written in place (IN_CREATE, IN_MODIFY) can be read half
//     written. IN_CLOSE_WRITE would not prove it complete: it says that one
//     open file was closed, not that no other descriptor is open or that the
//     writer will not append next (`> f` then `>> f`), and a writer that
//     crashed closes too. The quiet period lets such writers finish.
//   - A name that goes away (IN_DELETE, or renamed to a name that is not a
//     manifest) may be back a moment later: vim and emacs rename the file to
//     a backup and write it anew in place, and `rm f; cp new f` leaves a gap.
//     Reading the gap would remove the file's pods and delete their emptyDir
//     data.
//
// A manifest renamed to another manifest name in the directory is a move:
// both names are read at once, so its objects change file in one step and
// are never seen twice (a duplicate, which would also unsync the source)
// or not at all.
//
// A name renamed into place may have changed again by the time it is read:
// if it is gone then, that waits for the quiet period too (see
// scanner.readRenamed).
//
// Events on other names (dotfiles, editor swap and backup files, temp files)
// matter only when a manifest is a symlink, which may resolve through them
// (a mounted configMap's ..data), or has another name (a hard link): then
// they cause a full rescan once quiet.
type changes struct {
	in    map[string]bool // manifest names renamed into place: read at once
	away  map[string]bool // manifest names renamed to another one: read at once
	later map[string]bool // manifest names to read once the directory is quiet
	full  bool            // list and read the whole directory once quiet
	// movedFrom is the last manifest name renamed away, to pair with the
	// IN_MOVED_TO of the same rename, which follows it.
	movedFrom event
}

func newChanges() *changes {
	return &changes{in: map[string]bool{}, away: map[string]bool{}, later: map[string]bool{}}
}

// add records one event; links says whether any manifest is a symlink or
// a hard link.
func (c *changes) add(ev event, links bool) {
	switch {
	case ev.mask&unix.IN_Q_OVERFLOW != 0, ev.name == "":
		c.full = true // events were lost, or the directory itself changed
	case !isManifestName(ev.name):
		c.full = c.full || links
	case ev.mask&unix.IN_MOVED_TO != 0:
		c.in[ev.name] = true
		if ev.cookie != 0 && ev.cookie == c.movedFrom.cookie {
			c.away[c.movedFrom.name] = true
		}
	default:
		c.later[ev.name] = true
		if ev.mask&unix.IN_MOVED_FROM != 0 {
			c.movedFrom = ev
		}
	}
}

// takeNow returns the names to read at once, sorted: those renamed into
// place, and those renamed from (and not into since). It forgets them.
func (c *changes) takeNow() (in, away []string) {
	maps.DeleteFunc(c.away, func(name string, _ bool) bool { return c.in[name] })
	in, away = slices.Sorted(maps.Keys(c.in)), slices.Sorted(maps.Keys(c.away))
	clear(c.in)
	clear(c.away)
	return in, away
}

// wait makes names wait for the directory to be quiet.
func (c *changes) wait(names []string) {
	for _, name := range names {
		c.later[name] = true
	}
}

// waiting reports whether anything waits for the directory to be quiet.
func (c *changes) waiting() bool { return c.full || len(c.later) > 0 }

// takeLater returns what waited for the directory to be quiet: the names to
// read, sorted, or full when the whole directory must be read. It forgets
// them.
func (c *changes) takeLater() (names []string, full bool) {
	names, full = slices.Sorted(maps.Keys(c.later)), c.full
	clear(c.later)
	c.full = false
	return names, full
}
