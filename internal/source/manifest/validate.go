package manifest

import (
	"maps"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Report is what Validate found in a manifest directory.
type Report struct {
	Files   int // manifest files in the directory
	Objects int // objects defined by the files without problems
	// Problems are "path:line: message", in the order of the files and
	// their lines, with path the file's path under the directory given.
	Problems []string
}

// Validate reads dir once as a Source does at start, with the same
// scanner, parser and checks across files (duplicates), and reports every
// problem. It mounts, watches and contacts nothing. Its error says why the
// directory cannot be listed.
func Validate(dir string) (Report, error) {
	sc := newScanner(dir, "", zap.NewNop())
	// Every file counts as settled: what matters is its content, not
	// whether it may still be being written.
	sc.now = func() time.Time { return time.Now().Add(settleDelay) }
	sc.scan()
	if sc.dirErr != nil {
		return Report{}, sc.dirErr
	}
	var r Report
	for _, name := range slices.Sorted(maps.Keys(sc.files)) {
		f := sc.files[name]
		r.Files++
		problems := f.allProblems()
		if len(problems) == 0 {
			r.Objects += len(f.parsed)
		}
		for _, p := range problems {
			r.Problems = append(r.Problems, p.format(filepath.Join(dir, name)))
		}
	}
	return r, nil
}
