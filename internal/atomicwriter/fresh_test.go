package atomicwriter

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// writeNewFirst, set by TestWriteNewPassesTheWriterTests, makes mustWrite
// write each Writer's first payload with WriteNew; written holds the
// Writers that have written since.
var (
	writeNewFirst bool
	written       = map[*Writer]bool{}
)

// mustWriteNew writes payload with WriteNew and checks which path it took:
// the fresh one in an empty directory, the fall-back (refused as not empty)
// in any other.
func mustWriteNew(t *testing.T, w *Writer, payload map[string]File) bool {
	t.Helper()
	empty := len(entries(t, w.dir)) == 0
	var fellBack error
	w.fellBack = func(err error) { fellBack = err }
	defer func() { w.fellBack = nil }()
	before := w.freshWrites
	changed, err := w.WriteNew(payload)
	if err != nil {
		t.Fatalf("WriteNew: %v", err)
	}
	fresh := w.freshWrites == before+1
	switch {
	case empty && !fresh:
		t.Fatalf("WriteNew into an empty directory fell back: %v", fellBack)
	case !empty && (fresh || !errors.Is(fellBack, errNotEmpty)):
		t.Fatalf("WriteNew into a directory holding %v: fresh = %v, fell back for %v; want a fall-back, not empty", entries(t, w.dir), fresh, fellBack)
	}
	return changed
}

// The writer's tests, each Writer's first write done by WriteNew: into the
// new empty directory the fresh path must leave what Write leaves, and into
// one a test planted entries in (collisions, attacks) it must fall back.
func TestWriteNewPassesTheWriterTests(t *testing.T) {
	writeNewFirst = true
	t.Cleanup(func() { writeNewFirst, written = false, map[*Writer]bool{} })
	for name, test := range map[string]func(*testing.T){
		"Layout":                            TestWriteLayout,
		"Modes":                             TestWriteModes,
		"ChangeDetection":                   TestWriteChangeDetection,
		"RemovesKeys":                       TestWriteRemovesKeys,
		"UnchangedKeepsDirectory":           TestWriteUnchangedKeepsDirectory,
		"RepairsLinks":                      TestWriteRepairsLinks,
		"EmptyPayload":                      TestWriteEmptyPayload,
		"InvalidPayloadTouchesNothing":      TestWriteInvalidPayloadTouchesNothing,
		"RemovesCrashLeftovers":             TestWriteRemovesCrashLeftovers,
		"UnchangedFinishesCrashedCleanUp":   TestWriteUnchangedFinishesCrashedCleanUp,
		"LeavesForeignEntries":              TestWriteLeavesForeignEntries,
		"CollisionWithForeignEntry":         TestWriteCollisionWithForeignEntry,
		"FailureKeepsOldPayload":            TestWriteFailureKeepsOldPayload,
		"Owners":                            TestWriteOwners,
		"DiskFull":                          TestWriteDiskFull,
		"AttackPlantedDataLink":             TestAttackPlantedDataLink,
		"AttackPlantedTopLevelLink":         TestAttackPlantedTopLevelLink,
		"AttackLinksInsidePayloadDirectory": TestAttackLinksInsidePayloadDirectory,
		"AttackTimestampNamedLink":          TestAttackTimestampNamedLink,
		"AttackPlantedDataTmp":              TestAttackPlantedDataTmp,
		"AttackPlantedLinkInRepairedPath":   TestAttackPlantedLinkInRepairedPath,
		"AttackFIFOSwappedIntoPayload":      TestAttackFIFOSwappedIntoPayload,
	} {
		t.Run(name, test)
	}
}

// A directory holding anything, even an entry the payload does not name,
// is not written fast: WriteNew falls back to Write, which keeps the entry.
func TestWriteNewFallsBackInANonEmptyDirectory(t *testing.T) {
	dir, w := newVolume(t)
	must(t, os.WriteFile(filepath.Join(dir, "user.txt"), []byte("mine"), 0o600))
	var fellBack error
	w.fellBack = func(err error) { fellBack = err }
	changed, err := w.WriteNew(map[string]File{"a": file("A", 0o644)})
	if !changed || err != nil {
		t.Fatalf("WriteNew = %v, %v; want true, nil", changed, err)
	}
	if !errors.Is(fellBack, errNotEmpty) || !strings.Contains(fellBack.Error(), `"user.txt"`) || w.freshWrites != 0 {
		t.Fatalf("fell back for %v after %d fresh writes; want the refusal naming user.txt", fellBack, w.freshWrites)
	}
	assertEntries(t, dir, dataTarget(t, dir), dataLink, "a", "user.txt")
	assertContent(t, dir, "a", "A")
	assertContent(t, dir, "user.txt", "mine")
}

// A fresh write that fails part-way removes what it made and falls back to
// Write, which then writes the whole payload: one payload directory, no
// trace of the first attempt.
func TestWriteNewFallsBackAfterAFailure(t *testing.T) {
	dir, w := newVolume(t)
	injected := errors.New("injected failure")
	failed := false
	w.failWrite = func(p string) error {
		if p == "d/b" && !failed {
			failed = true
			return injected
		}
		return nil
	}
	var fellBack error
	w.fellBack = func(err error) { fellBack = err }
	payload := map[string]File{"a": file("A", 0o644), "d/b": file("B", 0o600), "z": file("Z", 0o644)}
	if changed, err := w.WriteNew(payload); !changed || err != nil {
		t.Fatalf("WriteNew = %v, %v; want true, nil", changed, err)
	}
	if !errors.Is(fellBack, injected) {
		t.Fatalf("fell back for %v, want the injected failure", fellBack)
	}
	assertEntries(t, dir, dataTarget(t, dir), dataLink, "a", "d", "z")
	assertContent(t, dir, "d/b", "B")
	assertContent(t, dir, "z", "Z")
}

// A fresh write that fills the tmpfs leaves it empty (its space given back)
// and fails as Write does, without the secret in the error.
func TestWriteNewDiskFull(t *testing.T) {
	dir := mountTinyTmpfs(t)
	w := New(dir)
	secret := bytes.Repeat([]byte("s3cr3t"), 20<<10) // 120 KiB, more than the tmpfs holds
	changed, err := w.WriteNew(map[string]File{"a": file("new-a", 0o644), "d/b": {Data: secret, Mode: 0o600}})
	if changed || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteNew = %v, %v; want false and ENOSPC", changed, err)
	}
	assertNoSecret(t, err, "s3cr3t")
	if got := entries(t, dir); len(got) != 0 {
		t.Fatalf("a failed fresh write left %v", got)
	}
	mustWrite(t, w, map[string]File{"a": {Data: bytes.Repeat([]byte("n"), 40<<10), Mode: 0o644}})
	assertEntries(t, dir, dataTarget(t, dir), dataLink, "a")
}

// An invalid payload touches nothing and is not retried by the full write.
func TestWriteNewInvalidPayloadTouchesNothing(t *testing.T) {
	dir, w := newVolume(t)
	w.fellBack = func(err error) { t.Errorf("fell back for %v", err) }
	changed, err := w.WriteNew(map[string]File{"a": file("A", 0o644), "../escape": file("x", 0o644)})
	if changed || !errors.Is(err, ErrInvalidPayload) {
		t.Fatalf("WriteNew = %v, %v; want false, ErrInvalidPayload", changed, err)
	}
	if got := entries(t, dir); len(got) != 0 {
		t.Fatalf("an invalid payload left %v", got)
	}
}

// Under the usual umask (022) a fresh write creates most files with their
// mode at once; each file must still end with its mode exactly, those the
// umask would strip (0777, 0666) included.
func TestWriteNewModesUnderTheUsualUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	processUmask = sync.OnceValues(readUmask)
	t.Cleanup(func() { syscall.Umask(old); processUmask = sync.OnceValues(readUmask) })
	dir, w := newVolume(t)
	modes := map[string]os.FileMode{"rw": 0o644, "ro": 0o400, "all": 0o777, "none": 0, "g": 0o640, "w": 0o666, "d/x": 0o755}
	payload := map[string]File{}
	for p, m := range modes {
		payload[p] = file("data", m)
	}
	payload["owned"] = File{Data: []byte("o"), Mode: 0o644, GID: id(int64(os.Getegid()))}
	modes["owned"] = 0o644
	if _, err := w.WriteNew(payload); err != nil || w.freshWrites != 1 {
		t.Fatalf("WriteNew = %v after %d fresh writes, want nil after 1", err, w.freshWrites)
	}
	ts := filepath.Join(dir, dataTarget(t, dir))
	for p, m := range modes {
		assertPerm(t, filepath.Join(ts, p), m)
		assertContent(t, ts, p, string(payload[p].Data))
	}
}
