package manifest

import (
	"maps"
	"slices"
	"time"

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
// Everything else waits for a quiet period: a name is read once it has had
// no event for the debounce delay, and no later than debounceMax after its
// first event:
//   - A file written in place (IN_CREATE, IN_MODIFY) can be read half
//     written. IN_CLOSE_WRITE would not prove it complete: it says that one
//     open file was closed, not that no other descriptor is open or that the
//     writer will not append next (`> f` then `>> f`), and a writer that
//     crashed closes too. The quiet period lets such writers finish. Such a
//     name waits for its own events only: another file's events never put
//     it off.
//   - A name that goes away (IN_DELETE, or renamed to a name that is not a
//     manifest) may be back a moment later: `git checkout` unlinks the file
//     and creates it anew, vim renames it to a backup and writes it anew in
//     place, and `rm f; cp new f` leaves a gap (TestToolsGapsAreCovered
//     runs each and logs its gap). Reading the gap would remove the file's
//     pods and delete their emptyDir data. Its objects may also be moving
//     to another file written after it (`git checkout` of a commit that
//     moves a pod removes the old file first, then writes the new one), so
//     a name that went away also waits for every name written or created
//     after it: the move is then read in one step. Other names that went
//     away do not hold it back, so a hundred deletions each wait for their
//     own quiet period, not for the last one.
//
// A full rescan (a listing of the whole directory) waits until the whole
// directory is quiet, as does every name while the scanner can only rescan
// (see scanner.whole), a name renamed into place and the recheck of
// held-back files too: a listing taken in another name's gap would find it
// gone.
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
	in    map[string]bool    // manifest names renamed into place: read at once
	away  map[string]bool    // manifest names renamed to another one: read at once
	later map[string]pending // manifest names to read once each is quiet
	full  pending            // list and read the whole directory once quiet
	// last is the time of the directory's last event.
	last time.Time
	// movedFrom is the last manifest name renamed away, to pair with the
	// IN_MOVED_TO of the same rename, which follows it.
	movedFrom event
}

// pending is when something waiting for a quiet period had its first and
// its last event since it was last read, and whether that last event took
// the name away; a zero first means nothing waits.
type pending struct {
	first, last time.Time
	away        bool
}

// touch records an event at now; away says that it took the name away.
func (p pending) touch(now time.Time, away bool) pending {
	if p.first.IsZero() {
		p.first = now
	}
	p.last, p.away = now, away
	return p
}

func (p pending) waits() bool { return !p.first.IsZero() }

// due is when p is read: delay after its last event, but no later than
// max after its first.
func (p pending) due(d debounce) time.Time {
	return minTime(p.last.Add(d.delay), p.first.Add(d.max))
}

func newChanges() *changes {
	return &changes{in: map[string]bool{}, away: map[string]bool{}, later: map[string]pending{}}
}

// add records one event, seen at now; links says whether any manifest is
// a symlink or a hard link.
func (c *changes) add(ev event, links bool, now time.Time) {
	c.last = now
	switch {
	case ev.mask&unix.IN_Q_OVERFLOW != 0, ev.name == "":
		c.full = c.full.touch(now, false) // events were lost, or the directory itself changed
	case !isManifestName(ev.name):
		if links {
			c.full = c.full.touch(now, false)
		}
	case ev.mask&unix.IN_MOVED_TO != 0:
		c.in[ev.name] = true
		if ev.cookie != 0 && ev.cookie == c.movedFrom.cookie {
			c.away[c.movedFrom.name] = true
		}
	default:
		c.later[ev.name] = c.later[ev.name].touch(now, ev.mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0)
		if ev.mask&unix.IN_MOVED_FROM != 0 {
			c.movedFrom = ev
		}
	}
}

// rescan makes the whole directory be read once it is quiet, as if an
// event had come at now: the resync's rescan, which must not list the
// directory in the gap of a name whose event has not been read yet.
func (c *changes) rescan(now time.Time) {
	c.last = now
	c.full = c.full.touch(now, false)
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

// wait makes names, which are gone, wait for a quiet period, as if each
// had gone away at now.
func (c *changes) wait(names []string, now time.Time) {
	for _, name := range names {
		c.later[name] = c.later[name].touch(now, true)
	}
}

// waiting reports whether anything waits for a quiet period.
func (c *changes) waiting() bool { return c.full.waits() || len(c.later) > 0 }

// quiet is when the whole directory is due: delay after its last event, but
// no later than max after the first event of anything waiting.
func (c *changes) quiet(d debounce) time.Time {
	first := c.full.first
	for _, p := range c.later {
		if first.IsZero() || p.first.Before(first) {
			first = p.first
		}
	}
	return minTime(c.last.Add(d.delay), first.Add(d.max))
}

// dueOf is when the name waiting with p is due: its own quiet period, and
// for a name that went away also that of every name written after it, but
// no later than max after its first event; whole makes every name wait for
// the whole directory.
func (c *changes) dueOf(p pending, d debounce, whole bool) time.Time {
	if whole {
		return c.quiet(d)
	}
	due := p.due(d)
	if !p.away {
		return due
	}
	for _, o := range c.later {
		if !o.away && o.last.After(p.last) && o.due(d).After(due) {
			due = o.due(d)
		}
	}
	return minTime(due, p.first.Add(d.max))
}

// next is when the first of what waits is due; zero when nothing waits.
func (c *changes) next(d debounce, whole bool) time.Time {
	var next time.Time
	if c.full.waits() {
		next = c.quiet(d)
	}
	for _, p := range c.later {
		if due := c.dueOf(p, d, whole); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	return next
}

// takeLater returns what is due at now: the names to read, sorted, or full
// when the whole directory must be read (and then every name waiting). It
// forgets them; the rest waits on.
func (c *changes) takeLater(now time.Time, d debounce, whole bool) (names []string, full bool) {
	if c.full.waits() && !now.Before(c.quiet(d)) {
		names = slices.Sorted(maps.Keys(c.later))
		clear(c.later)
		c.full = pending{}
		return names, true
	}
	for name, p := range c.later {
		if !now.Before(c.dueOf(p, d, whole)) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		delete(c.later, name)
	}
	slices.Sort(names)
	return names, false
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
