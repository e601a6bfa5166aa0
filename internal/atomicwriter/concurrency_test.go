package atomicwriter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// concurrentFiles are the files of every version, with their sizes: flat and
// nested, from a few bytes to more than one page.
var concurrentFiles = map[string]int{
	"a":             17,
	"b":             4096,
	"nested/c":      70_000,
	"nested/deep/d": 333,
}

// versionContent is file content of version n: "vN-" repeated to size bytes.
func versionContent(n, size int) string {
	unit := fmt.Sprintf("v%d-", n)
	return strings.Repeat(unit, size/len(unit)+1)[:size]
}

func versionPayload(n int) map[string]File {
	payload := map[string]File{}
	for p, size := range concurrentFiles {
		payload[p] = File{Data: []byte(versionContent(n, size)), Mode: 0o644}
	}
	return payload
}

// versionOf returns the version a complete file belongs to, or an error for
// partial or mixed content.
func versionOf(p string, data []byte) (int, error) {
	var n int
	if _, err := fmt.Sscanf(string(data), "v%d-", &n); err != nil {
		return 0, fmt.Errorf("%s: no version prefix in %d bytes", p, len(data))
	}
	if string(data) != versionContent(n, concurrentFiles[p]) {
		return 0, fmt.Errorf("%s: partial or mixed content of version %d (%d bytes)", p, n, len(data))
	}
	return n, nil
}

// readSnapshot resolves ..data once and reads every file from that
// directory. ok is false when the directory vanished mid-read (the writer
// removed it), which a reader retries.
func readSnapshot(dir string) (ok bool, err error) {
	target, err := os.Readlink(filepath.Join(dir, dataLink))
	if err != nil {
		return false, err
	}
	seen := -1
	for p := range concurrentFiles {
		data, err := os.ReadFile(filepath.Join(dir, target, p))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		n, err := versionOf(p, data)
		if err != nil {
			return false, err
		}
		if seen >= 0 && n != seen {
			return false, fmt.Errorf("%s holds version %d and %d", target, seen, n)
		}
		seen = n
	}
	return true, nil
}

// readKeys reads every file through the top-level links; each must be
// complete, though files may come from different versions.
func readKeys(dir string) (ok bool, err error) {
	for p := range concurrentFiles {
		data, err := os.ReadFile(filepath.Join(dir, p))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if _, err := versionOf(p, data); err != nil {
			return false, err
		}
	}
	return true, nil
}

func TestConcurrentReadersSeeWholeVersions(t *testing.T) {
	dir, w := newVolume(t)
	mustWrite(t, w, versionPayload(0))
	const versions = 150
	var (
		done   atomic.Bool
		reads  atomic.Int64
		errsMu sync.Mutex
		errs   []error // guarded by errsMu
		wg     sync.WaitGroup
	)
	reader := func(read func(string) (bool, error)) {
		for !done.Load() {
			ok, err := read(dir)
			if err != nil {
				errsMu.Lock()
				errs = append(errs, err)
				errsMu.Unlock()
				return
			}
			if ok {
				reads.Add(1)
			}
		}
	}
	wg.Go(func() { reader(readSnapshot) })
	wg.Go(func() { reader(readSnapshot) })
	wg.Go(func() { reader(readKeys) })
	for n := 1; n <= versions; n++ {
		if _, err := w.Write(versionPayload(n)); err != nil {
			t.Errorf("write version %d: %v", n, err)
			break
		}
	}
	done.Store(true)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if reads.Load() == 0 {
		t.Fatal("no reader completed a read")
	}
	t.Logf("%d complete reads during %d writes", reads.Load(), versions)
}
