package atomicwriter

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func assertOwner(t *testing.T, name string, uid, gid uint32) {
	t.Helper()
	info, err := os.Lstat(name)
	must(t, err)
	st := info.Sys().(*syscall.Stat_t)
	if st.Uid != uid || st.Gid != gid {
		t.Errorf("%s: owner %d:%d, want %d:%d", name, st.Uid, st.Gid, uid, gid)
	}
}

func TestWriteOwners(t *testing.T) {
	requireRoot(t, "the ownership test (it chowns files)")
	dir, w := newVolume(t)
	payload := map[string]File{
		"a":       {Data: []byte("A"), Mode: 0o400, UID: id(1234), GID: id(5678)},
		"d/e/f":   {Data: []byte("F"), Mode: 0o440, GID: id(5678)},
		"plain":   file("P", 0o644),
		"only/id": {Data: []byte("U"), Mode: 0o600, UID: id(4321)},
	}
	mustWrite(t, w, payload)
	ts := filepath.Join(dir, dataTarget(t, dir))
	euid, egid := uint32(os.Geteuid()), uint32(os.Getegid())
	assertOwner(t, filepath.Join(ts, "a"), 1234, 5678)
	assertOwner(t, filepath.Join(ts, "d/e/f"), euid, 5678)
	assertOwner(t, filepath.Join(ts, "d"), euid, 5678)
	assertOwner(t, filepath.Join(ts, "d/e"), euid, 5678)
	assertOwner(t, filepath.Join(ts, "plain"), euid, egid)
	assertOwner(t, filepath.Join(ts, "only/id"), 4321, egid)
	assertOwner(t, filepath.Join(ts, "only"), euid, egid)
	assertPerm(t, filepath.Join(ts, "a"), 0o400) // chown must not disturb the mode

	if mustWrite(t, w, payload) {
		t.Fatal("same payload with owners reported a change")
	}
	payload["a"] = File{Data: []byte("A"), Mode: 0o400, UID: id(1234), GID: id(9)}
	if !mustWrite(t, w, payload) {
		t.Fatal("a new gid was not written")
	}
	assertOwner(t, filepath.Join(dir, dataTarget(t, dir), "a"), 1234, 9)
}
