package emptydir_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/emptydir"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// fakeLimiter records its calls; it "makes" a directory with os.Mkdir.
type fakeLimiter struct {
	calls     []string
	can       bool  // Create makes the directory
	createErr error // returned by Create after making it
	made      map[string]bool
}

func (f *fakeLimiter) Create(_ context.Context, dir string, size int64) (bool, error) {
	f.calls = append(f.calls, "create")
	if !f.can {
		return false, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return false, err
	}
	f.made[dir] = true
	return true, f.createErr
}

func (f *fakeLimiter) Limit(_ context.Context, dir string, size int64) (bool, error) {
	f.calls = append(f.calls, "limit")
	return f.made[dir], nil
}

// MayHaveMade is a question, not an action: not among the calls.
func (f *fakeLimiter) MayHaveMade(dir string) bool { return f.made[dir] }

func (f *fakeLimiter) Remove(_ context.Context, dir string) (bool, error) {
	f.calls = append(f.calls, "remove")
	if !f.made[dir] {
		return false, nil
	}
	delete(f.made, dir)
	return true, os.Remove(dir)
}

// TestLimiterUse: only a disk emptyDir with a sizeLimit is made by the
// Limiter, an existing one gets its limit again and is never made anew,
// a failed creation is rolled back, and teardown asks the Limiter to
// remove only a directory it may have made (MayHaveMade) and with no
// mount at or below it.
func TestLimiterUse(t *testing.T) {
	mi := resource.MustParse("1Mi")
	for _, tc := range []struct {
		name      string
		src       v1.EmptyDirVolumeSource
		can       bool
		exists    bool
		createErr error
		wantCalls []string // set-up, then teardown
	}{
		{"disk with sizeLimit", v1.EmptyDirVolumeSource{SizeLimit: &mi}, true, false, nil, []string{"create", "remove"}},
		{"disk with sizeLimit, cannot limit", v1.EmptyDirVolumeSource{SizeLimit: &mi}, false, false, nil, []string{"create"}},
		{"existing, not the Limiter's", v1.EmptyDirVolumeSource{SizeLimit: &mi}, true, true, nil, []string{"limit"}},
		{"creation fails", v1.EmptyDirVolumeSource{SizeLimit: &mi}, true, false, errors.New("qgroup limit failed"), []string{"create", "remove"}},
		{"disk without sizeLimit", v1.EmptyDirVolumeSource{}, true, false, nil, nil},
		// A tmpfs is a mount: its teardown never asks the Limiter.
		{"memory", v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: &mi}, true, false, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLimiter{can: tc.can, createErr: tc.createErr, made: map[string]bool{}}
			p := &emptydir.Plugin{Mounter: &mount.Fake{}, Limiter: f}
			dir := plugintest.VolumeDir(t)
			if tc.exists {
				if _, err := mount.MakeDir(dir, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			_, err := p.SetUp(context.Background(), spec(tc.src), dir)
			if tc.createErr != nil {
				if !errors.Is(err, tc.createErr) {
					t.Fatalf("set-up: %v, want %v", err, tc.createErr)
				}
				if _, serr := os.Lstat(dir); !errors.Is(serr, os.ErrNotExist) {
					t.Fatalf("after a failed creation: %v, want the directory rolled back", serr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if err := p.TearDown(context.Background(), dir); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(f.calls, tc.wantCalls) {
				t.Errorf("calls %q, want %q", f.calls, tc.wantCalls)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after teardown: %v", err)
			}
		})
	}
}
