package hostpath_test

import (
	"context"
	"maps"
	"path"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/hostroot"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
)

// FuzzHostPathSetUp checks arbitrary host paths and types, valid or not,
// in the host root of newHostRoot, whose links lead out of it in the
// agent's view (absolute links, "../../..", "/.."). Validate and SetUp
// must not panic; SetUp must change nothing outside the host root, name
// no path below the host root in its errors, and leave a path it accepts
// for DirectoryOrCreate or FileOrCreate a directory or a file of the host.
// Seeds: the f.Add calls and testdata/fuzz/FuzzHostPathSetUp.
func FuzzHostPathSetUp(f *testing.F) {
	for _, seed := range []struct {
		path string
		typ  v1.HostPathType
	}{
		{"/var/run/new/sub", v1.HostPathDirectoryOrCreate},
		{"/a/b/up/made", v1.HostPathDirectoryOrCreate},
		{"/slashup/../x", v1.HostPathDirectoryOrCreate},
		{"/var/run/created", v1.HostPathFileOrCreate},
		{"/lnk", v1.HostPathFileOrCreate},
		{"/var/spool/x", v1.HostPathDirectoryOrCreate},
		{"/var/run/app.sock", v1.HostPathSocket},
		{"/var/run/null", v1.HostPathCharDev},
		{"/var/run/blk", v1.HostPathBlockDev},
		{"/etc/rel", v1.HostPathDirectory},
		{"/marker", v1.HostPathFile},
		{"relative/x", v1.HostPathUnset},
		{"/x", "Dir"},
	} {
		f.Add(seed.path, string(seed.typ))
	}
	f.Fuzz(func(t *testing.T, p, typ string) {
		h := newHostRoot(t)
		s := spec(p, v1.HostPathType(typ))
		plugin := &hostpath.Plugin{HostRoot: h.root}
		valid := plugin.Validate(s) == nil
		outside := h.outside(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := plugin.SetUp(ctx, s, "")
		if after := h.outside(t); !maps.Equal(outside, after) {
			t.Fatalf("SetUp(%q, %q) changed files outside the host root:\nbefore %q\nafter  %q", p, typ, outside, after)
		}
		if err != nil {
			if strings.Contains(err.Error(), h.root) {
				t.Fatalf("SetUp(%q, %q): error %q names the path below the host root", p, typ, err)
			}
			return
		}
		if res.Path != p {
			t.Fatalf("SetUp(%q, %q): Path = %q, want the host path", p, typ, res.Path)
		}
		if want, ok := created[v1.HostPathType(typ)]; ok && valid {
			assertFileType(t, h.root, p, want)
		}
	})
}

// created maps the types that create a missing path to what they create.
var created = map[v1.HostPathType]uint32{
	v1.HostPathDirectoryOrCreate: unix.S_IFDIR,
	v1.HostPathFileOrCreate:      unix.S_IFREG,
}

func assertFileType(t *testing.T, root, p string, want uint32) {
	t.Helper()
	r, err := hostroot.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.FileType(path.Clean("/" + p))
	if err != nil || got != want {
		t.Fatalf("after SetUp of %q: file type %#o (%v), want %#o", p, got, err, want)
	}
}
