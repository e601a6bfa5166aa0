package local

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestOwnershipReportsProgress: a walk longer than progressEvery reports
// the entries changed so far while it runs, and once more when done.
func TestOwnershipReportsProgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	dir := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Nanosecond // every entry is past the next report
	type call struct {
		entries int
		done    bool
	}
	var calls []call
	err := setOwnership(dir, 4321, v1.FSGroupChangeAlways, func(n int, _ time.Duration, done bool) { calls = append(calls, call{n, done}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 2 || calls[len(calls)-1] != (call{6, true}) || calls[len(calls)-2].done {
		t.Errorf("reports = %+v; want progress, then done with 6 entries", calls)
	}
}
