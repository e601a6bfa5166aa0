package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestOneLine(t *testing.T) {
	mountUtils := errors.New("mount failed: exit status 32\nMounting command: mount\nMounting arguments: -t nfs 127.0.0.1:/missing /dir\nOutput: mount.nfs: mounting 127.0.0.1:/missing failed\r\n  reason given by server: No such file or directory\n")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"one line stays as it is", errors.New("mount points remain"), "mount points remain"},
		{"mount-utils' report", fmt.Errorf("mount 127.0.0.1:/missing on /dir: %w", mountUtils),
			"mount 127.0.0.1:/missing on /dir: mount failed: exit status 32; Mounting command: mount; Mounting arguments: -t nfs 127.0.0.1:/missing /dir; Output: mount.nfs: mounting 127.0.0.1:/missing failed; reason given by server: No such file or directory"},
		{"errors.Join", errors.Join(errors.New("unmounted: EBUSY"), errors.New("forced: EBUSY"), errors.New("detached: EINVAL")),
			"unmounted: EBUSY; forced: EBUSY; detached: EINVAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OneLine(tt.err).Error(); got != tt.want {
				t.Errorf("OneLine = %q\nwant      %q", got, tt.want)
			}
		})
	}
	if OneLine(nil) != nil {
		t.Error("OneLine(nil) is not nil")
	}
	wrapped := OneLine(fmt.Errorf("a\nb: %w", fs.ErrNotExist))
	if !errors.Is(wrapped, fs.ErrNotExist) {
		t.Error("errors.Is does not see through OneLine")
	}
}
