package atomicwriter

import (
	"fmt"
	"os"
	"sync"
)

// File is one file of a payload.
type File struct {
	// Data is the file's content, written byte for byte.
	Data []byte
	// Mode holds the permission bits (e.g. 0644), applied exactly: no umask.
	// A zero Mode gives a file no one but root can read. Bits other than
	// the permission bits are rejected.
	Mode os.FileMode
	// UID, when set, makes the file owned by this uid. When nil the owner is
	// left as created and not compared.
	UID *int64
	// GID, when set, makes the file owned by this gid (fsGroup). Parent
	// directories created for nested paths get it too. When nil the group
	// is left as created and not compared.
	GID *int64
}

// Writer writes payloads into one volume directory.
type Writer struct {
	dir string

	// mu serialises Write. It guards no field: it keeps two writes of this
	// Writer from interleaving on disk.
	mu sync.Mutex

	// failWrite, when set by a test, is called before each payload file is
	// written; an error it returns fails that file.
	failWrite func(path string) error

	// beforeOpen, when set by a test, is called with each name (relative
	// to the volume directory) that the comparison of the current payload
	// is about to open.
	beforeOpen func(name string)

	// fellBack, when set by a test, is called with the reason each
	// WriteNew fell back to the full write.
	fellBack func(error)

	// freshWrites counts the WriteNews done without falling back, for
	// tests; guarded by mu.
	freshWrites int
}

// New returns a Writer for dir, which must exist. New does no I/O.
func New(dir string) *Writer {
	return &Writer{dir: dir}
}

// Write makes the directory hold exactly payload, whose keys are
// slash-separated relative paths (see ValidatePath), and reports whether the
// payload on disk changed. A payload equal to the current one (same paths,
// bytes, modes and, where set, owners) is not rewritten and Write reports
// false; the clean-up still runs, repairing missing or wrong top-level links
// and finishing what a write stopped after its switch (a crash) left behind.
//
// Every path is validated first; an invalid payload touches nothing. After a
// failed write the old payload stays fully readable through the links.
func (w *Writer) Write(payload map[string]File) (changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := validatePayload(payload); err != nil {
		return false, err
	}
	return w.writeRoot(payload)
}

// writeRoot is Write on a valid payload, with w.mu held.
func (w *Writer) writeRoot(payload map[string]File) (changed bool, err error) {
	root, err := os.OpenRoot(w.dir)
	if err != nil {
		return false, fmt.Errorf("open volume directory: %w", err)
	}
	defer root.Close()
	changed, err = w.write(root, payload)
	if err != nil {
		return changed, fmt.Errorf("write volume directory %s: %w", w.dir, err)
	}
	return changed, nil
}

// write is Write's algorithm on an open volume directory.
func (w *Writer) write(root *os.Root, payload map[string]File) (bool, error) {
	names := topLevelNames(payload)
	if err := checkCollisions(root, names); err != nil {
		return false, err
	}
	if old := currentDataDir(root); old != "" && w.matches(root, old, payload) {
		return false, cleanUp(root, names, old)
	}
	newDir, err := w.writeDataDir(root, payload)
	if err != nil {
		return false, err
	}
	if err := switchData(root, newDir); err != nil {
		return false, removePartial(root, newDir, err)
	}
	return true, cleanUp(root, names, newDir)
}

// cleanUp runs after the switch, or with the current payload unchanged: the
// payload in current is live whatever it returns, and a later Write, even of
// the same payload, finishes what it could not.
func cleanUp(root *os.Root, names []string, current string) error {
	if err := ensureLinks(root, names); err != nil {
		return err
	}
	entries, err := readTopLevel(root)
	if err != nil {
		return err
	}
	if err := removeStaleLinks(root, entries, names); err != nil {
		return err
	}
	if err := removeStaleTmp(root, entries); err != nil {
		return err
	}
	return removeStaleDirs(root, entries, current)
}
