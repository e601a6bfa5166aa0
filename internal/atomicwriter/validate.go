package atomicwriter

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
)

const (
	maxPathLength = 4096 // bytes in a whole payload path (PATH_MAX)
	maxNameLength = 255  // bytes in one path element (NAME_MAX)
)

// ErrInvalidPayload is wrapped by every error about a payload that is wrong
// in itself (a bad path, mode or owner, or two paths that cannot both exist);
// such a write touches nothing on disk.
var ErrInvalidPayload = errors.New("invalid payload")

// ValidatePath checks one payload path. A valid path is not empty, relative,
// at most 4096 bytes, free of NUL bytes, does not start with ".." (that
// prefix is reserved for the writer's own entries such as ..data), and has
// no element that is empty, "." or "..", nor longer than 255 bytes.
//
// Empty and "." elements ("a//b", "a/./b", "a/") are rejected rather than
// normalised: normalising would let two keys of one payload name the same
// file, and the kubelet never produces such paths from valid API objects.
func ValidatePath(p string) error {
	if reason := pathProblem(p); reason != "" {
		return fmt.Errorf("%w: path %q: %s", ErrInvalidPayload, shorten(p), reason)
	}
	return nil
}

// pathProblem says what is wrong with p, or "" when nothing is.
func pathProblem(p string) string {
	switch {
	case p == "":
		return "must not be empty"
	case strings.HasPrefix(p, "/"):
		return "must be relative"
	case len(p) > maxPathLength:
		return fmt.Sprintf("must be at most %d bytes, is %d", maxPathLength, len(p))
	case strings.IndexByte(p, 0) >= 0:
		return "must not contain a NUL byte"
	case strings.HasPrefix(p, ".."):
		return "must not start with '..'"
	}
	for _, elem := range strings.Split(p, "/") {
		if reason := elementProblem(elem); reason != "" {
			return reason
		}
	}
	return ""
}

func elementProblem(elem string) string {
	switch {
	case elem == "":
		return "must not contain an empty element"
	case elem == "." || elem == "..":
		return fmt.Sprintf("must not contain a '%s' element", elem)
	case len(elem) > maxNameLength:
		return fmt.Sprintf("each element must be at most %d bytes, one is %d", maxNameLength, len(elem))
	}
	return ""
}

// shorten keeps over-long paths from flooding error messages.
func shorten(p string) string {
	const keep = 64
	if len(p) <= keep {
		return p
	}
	return p[:keep] + "..."
}

// validatePayload checks every path, mode and owner, and that no path is
// both a file and the parent directory of another path.
func validatePayload(payload map[string]File) error {
	for _, p := range sortedPaths(payload) {
		if err := ValidatePath(p); err != nil {
			return err
		}
		if err := validateFile(p, payload[p]); err != nil {
			return err
		}
	}
	for _, dir := range parentDirs(payload) {
		if _, ok := payload[dir]; ok {
			return fmt.Errorf("%w: path %q is a file and also the parent directory of other paths", ErrInvalidPayload, dir)
		}
	}
	return nil
}

func validateFile(p string, f File) error {
	if f.Mode&^os.ModePerm != 0 {
		return fmt.Errorf("%w: path %q: mode %v has bits other than permission bits", ErrInvalidPayload, p, f.Mode)
	}
	for _, id := range []*int64{f.UID, f.GID} {
		if id != nil && (*id < 0 || *id >= math.MaxUint32) {
			return fmt.Errorf("%w: path %q: owner id %d out of range", ErrInvalidPayload, p, *id)
		}
	}
	return nil
}

func sortedPaths(payload map[string]File) []string {
	paths := make([]string, 0, len(payload))
	for p := range payload {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// parentDirs lists, sorted and without duplicates, every directory that
// nested payload paths need ("a", "a/b" for "a/b/c"). Sorted order puts a
// parent before its children.
func parentDirs(payload map[string]File) []string {
	seen := map[string]bool{}
	for p := range payload {
		for i := strings.IndexByte(p, '/'); i >= 0; i = nextSlash(p, i) {
			seen[p[:i]] = true
		}
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

func nextSlash(p string, i int) int {
	j := strings.IndexByte(p[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// topLevelNames lists, sorted and without duplicates, the first element of
// every payload path: the names that get a link in the volume directory.
func topLevelNames(payload map[string]File) []string {
	seen := map[string]bool{}
	for p := range payload {
		name, _, _ := strings.Cut(p, "/")
		seen[name] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
