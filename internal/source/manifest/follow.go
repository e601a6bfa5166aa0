package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// follower keeps the watcher on the directory that the manifest path names
// now. A watch follows an inode, not a path: the directory replaced (`mv m
// m.old; mkdir m`) or a symlink on the way swapped to another one (git-sync:
// `ln -sfn v2 current.tmp && mv -T current.tmp current`) leaves it on the
// old directory, and a symlink swap gives that directory no event at all.
// So the follower also watches every point where the path can change — the
// name of each symlink followed, in its directory, and the directory's own
// name, in its parent — and, when one of them changes, resolves the path
// again and moves the directory's watch to what it names now. It is used
// by Run's goroutine only.
type follower struct {
	path string // absolute, as given
	w    *watcher
	// content is the watch of the directory the path named at the last
	// follow, -1 when it named none; dir is that directory.
	content int
	dir     string
	// points are, by watch, the names whose change makes the path name
	// another directory.
	points map[int]map[string]bool
}

func newFollower(path string, w *watcher) *follower {
	return &follower{path: path, w: w, content: -1}
}

// followTries bounds how often follow resolves the path again when it
// changed while follow was watching it.
const followTries = 3

// follow resolves the path, watches its points and the directory it names,
// and drops the watches it no longer needs. It reports whether the path
// names another directory than at the last follow (or none, or one again).
// The points are watched before the directory is, and the path is then
// resolved again, so a change made meanwhile is either seen here or
// reported by a point's watch.
func (fl *follower) follow() (moved bool, err error) {
	var dir string
	points := map[int]map[string]bool{}
	var errs []error
	for range followTries {
		var found []point
		dir, found, err = resolve(fl.path)
		errs = append(errs, fl.watchPoints(points, found)...)
		if again, _, _ := resolve(fl.path); again == dir {
			break
		}
	}
	content := -1
	if err == nil {
		content, err = fl.w.add(dir, watchMask)
	}
	for wd := range fl.points {
		if points[wd] == nil && wd != content {
			fl.w.remove(wd)
		}
	}
	if old := fl.content; old >= 0 && old != content && points[old] == nil {
		fl.w.remove(old)
	}
	moved = content != fl.content
	fl.content, fl.dir, fl.points = content, dir, points
	return moved, errors.Join(append(errs, err)...)
}

// watchPoints watches the directories of found and adds, by watch, the
// names to follow to points. A point that cannot be watched is left to the
// resync; its error is returned.
func (fl *follower) watchPoints(points map[int]map[string]bool, found []point) (errs []error) {
	for _, p := range found {
		wd, err := fl.w.add(p.dir, pathMask)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if points[wd] == nil {
			points[wd] = map[string]bool{}
		}
		points[wd][p.name] = true
	}
	return errs
}

// eventKind tells what an event means for the source.
type eventKind int

const (
	otherEvent   eventKind = iota // of a watch no longer followed, or of a name that does not matter
	contentEvent                  // in the manifest directory
	pathEvent                     // the path may name another directory now
	lostEvents                    // the queue overflowed: anything may have changed
)

// kind tells what ev means.
func (fl *follower) kind(ev event) eventKind {
	switch {
	case ev.mask&unix.IN_Q_OVERFLOW != 0:
		return lostEvents
	case ev.wd == fl.content && ev.mask&selfMask != 0:
		return pathEvent
	case ev.wd == fl.content:
		return contentEvent
	case fl.points[ev.wd] == nil:
		return otherEvent
	case ev.mask&selfMask != 0 || fl.points[ev.wd][ev.name]:
		return pathEvent
	}
	return otherEvent
}

// point is a name in a directory whose change can make the manifest path
// name another directory.
type point struct{ dir, name string }

func (p point) String() string { return filepath.Join(p.dir, p.name) }

// maxLinks is how many symlinks resolve follows, as the kernel's limit.
const maxLinks = 40

var errTooManyLinks = errors.New("too many levels of symbolic links")

// resolve follows path, which is absolute, component by component as the
// kernel does, and returns the directory it names now, without symlinks,
// with its points in the order met: each symlink followed, and the
// directory's own name in its parent. A ".." after a symlink goes up from
// where the symlink led. When a component is missing, it returns the points
// up to it and the missing component, with the error.
func resolve(path string) (dir string, points []point, err error) {
	rest := strings.Split(path, "/")
	dir = "/"
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			dir = filepath.Dir(dir)
			continue
		}
		next := filepath.Join(dir, name)
		info, err := os.Lstat(next)
		if err != nil {
			return "", append(points, point{dir, name}), err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			dir = next
			continue
		}
		points = append(points, point{dir, name})
		if links++; links > maxLinks {
			return "", points, fmt.Errorf("resolve %s: %w", path, errTooManyLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", points, err
		}
		if filepath.IsAbs(target) {
			dir = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	if dir != "/" {
		points = append(points, point{filepath.Dir(dir), filepath.Base(dir)})
	}
	return dir, points, nil
}
