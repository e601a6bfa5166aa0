package hostroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenOwned: a host path is opened, its symlinks followed inside the
// root, only when no one but root can change what it names.
func TestOpenOwned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("gives directories to another user: needs root")
	}
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"data/vol", "mnt", "user/vol", "open/vol", "tmp/root-owned", "tmp/users", "held/x"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []struct{ link, target string }{
		{"mnt/disks", "/data"},      // absolute: inside the root
		{"mnt/up", "../../../data"}, // ".." stops at the root
		{"held/link", "/data"},      // held in a directory a user owns
		{"mnt/loop", "/mnt/loop"},   // a loop
		{"mnt/user", "/user"},       // to a path a user can change
		{"mnt/file", "/data/vol/f"}, // a file where a directory is needed
	} {
		if err := os.Symlink(l.target, filepath.Join(host, l.link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(host, "data", "vol", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    string
		mode os.FileMode
		uid  int
	}{
		{"user", 0o755, 1000}, {"held", 0o755, 1000}, {"open", 0o777, 0}, {"tmp", 0o1777, 0}, {"tmp/users", 0o755, 1000},
	} {
		if err := os.Chown(filepath.Join(host, c.p), c.uid, 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(filepath.Join(host, c.p), uint32(c.mode)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Open(host)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := idOf(t, filepath.Join(host, "data", "vol"))
	for _, tc := range []struct {
		p       string
		want    fileID // zero: an error
		wantErr string
	}{
		{p: "/data/vol", want: want},
		{p: "/mnt/disks/vol", want: want},
		{p: "/mnt/up/vol", want: want},
		{p: "/tmp/root-owned", want: idOf(t, filepath.Join(host, "tmp", "root-owned"))},
		{p: "/user/vol", wantErr: "/user belongs to uid 1000"},
		{p: "/mnt/user/vol", wantErr: "/user belongs to uid 1000"},
		{p: "/held/link/vol", wantErr: "/held belongs to uid 1000"},
		{p: "/open/vol", wantErr: "/open is writable by its group or by others (mode 0777)"},
		{p: "/tmp/users", wantErr: "its entry users belongs to uid 1000"},
		{p: "/mnt/loop", wantErr: "too many levels of symbolic links"},
		{p: "/mnt/file/vol", wantErr: "not a directory"},
		{p: "/data/gone", wantErr: "no such file"},
	} {
		t.Run(tc.p, func(t *testing.T) {
			fd, err := r.OpenOwned(tc.p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.p) {
					t.Fatalf("OpenOwned = %v; want an error naming %s and saying %q", err, tc.p, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "uid") || strings.Contains(tc.wantErr, "mode") {
					if !errors.Is(err, ErrNotOwned) {
						t.Errorf("%v is not ErrNotOwned", err)
					}
				}
				if tc.wantErr == "no such file" && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%v is not fs.ErrNotExist", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				t.Fatal(err)
			}
			if got := (fileID{st.Dev, st.Ino}); got != tc.want {
				t.Errorf("opened %+v; want %+v", got, tc.want)
			}
		})
	}
}

type fileID struct{ dev, ino uint64 }

func idOf(t *testing.T, p string) fileID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return fileID{st.Dev, st.Ino}
}
