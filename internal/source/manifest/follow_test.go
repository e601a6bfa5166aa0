package manifest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestResolve(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"v1/sub", "real"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink(t, "v1", filepath.Join(root, "current"))
	mustSymlink(t, filepath.Join(root, "current"), filepath.Join(root, "abs"))
	mustSymlink(t, "current/sub/..", filepath.Join(root, "up"))
	mustSymlink(t, "missing", filepath.Join(root, "dangling"))
	mustSymlink(t, "loop", filepath.Join(root, "loop"))
	for _, tc := range []struct {
		path, dir string
		points    []point
		err       error
	}{
		{path: "real", dir: "real", points: []point{{"", "real"}}},
		{path: "current", dir: "v1", points: []point{{"", "current"}, {"", "v1"}}},
		{path: "current/sub", dir: "v1/sub", points: []point{{"", "current"}, {"v1", "sub"}}},
		{path: "abs/sub", dir: "v1/sub", points: []point{{"", "abs"}, {"", "current"}, {"v1", "sub"}}},
		{path: "up", dir: "v1", points: []point{{"", "up"}, {"", "current"}, {"", "v1"}}},
		{path: "gone/sub", points: []point{{"", "gone"}}, err: fs.ErrNotExist},
		{path: "dangling", points: []point{{"", "dangling"}, {"", "missing"}}, err: fs.ErrNotExist},
		{path: "loop", err: errTooManyLinks},
	} {
		t.Run(tc.path, func(t *testing.T) {
			dir, points, err := resolve(filepath.Join(root, tc.path))
			if !errors.Is(err, tc.err) || (tc.err != nil) != (err != nil) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if tc.err == nil && dir != filepath.Join(root, tc.dir) {
				t.Errorf("dir %s, want %s", dir, filepath.Join(root, tc.dir))
			}
			if tc.points == nil {
				return
			}
			for i := range tc.points {
				tc.points[i].dir = filepath.Join(root, tc.points[i].dir)
			}
			if !slices.Equal(points, tc.points) {
				t.Errorf("points %v, want %v", points, tc.points)
			}
		})
	}
}
