package atomicwriter

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestValidatePath(t *testing.T) {
	name255 := strings.Repeat("n", 255)
	tests := []struct {
		path string
		want string // substring of the error; "" for a valid path
	}{
		{"key", ""},
		{"a/b/c", ""},
		{"dir/..hidden", ""}, // only the first element may not start with ".."
		{"a.b", ""},
		{".hidden", ""},
		{"a/...", ""},
		{name255, ""},
		{"d/" + name255, ""},
		{strings.Repeat("a/", 2047) + "bb", ""}, // exactly 4096 bytes
		{"", "must not be empty"},
		{"/abs", "must be relative"},
		{"/", "must be relative"},
		{"../../etc/x", "must not start with '..'"},
		{"..", "must not start with '..'"},
		{"..data", "must not start with '..'"},
		{"..data/key", "must not start with '..'"},
		{"..2026_11_22_04_05_06.1", "must not start with '..'"},
		{"...", "must not start with '..'"},
		{"a/../b", "'..' element"},
		{"a/..", "'..' element"},
		{".", "'.' element"},
		{"./a", "'.' element"},
		{"a/./b", "'.' element"},
		{"a//b", "empty element"},
		{"a/", "empty element"},
		{strings.Repeat("n", 256), "at most 255 bytes"},
		{"d/" + strings.Repeat("n", 256), "at most 255 bytes"},
		{strings.Repeat("a/", 2048) + "b", "at most 4096 bytes"}, // 4097 bytes
		{"a\x00b", "NUL"},
	}
	for _, tt := range tests {
		err := ValidatePath(tt.path)
		if tt.want == "" {
			if err != nil {
				t.Errorf("ValidatePath(%.40q) = %v, want nil", tt.path, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidPayload) {
			t.Errorf("ValidatePath(%.40q) = %v, want ErrInvalidPayload mentioning %q", tt.path, err, tt.want)
		}
	}
}

func TestValidatePathErrorNamesPath(t *testing.T) {
	err := ValidatePath("../../etc/x")
	if err == nil || !strings.Contains(err.Error(), `"../../etc/x"`) {
		t.Fatalf("error %v does not name the path", err)
	}
	long := strings.Repeat("x", 5000)
	if err := ValidatePath(long); err == nil || len(err.Error()) > 300 {
		t.Fatalf("error for a 5000-byte path is %d bytes long, want it shortened", len(err.Error()))
	}
}

func TestValidatePayload(t *testing.T) {
	tests := []struct {
		name    string
		payload map[string]File
		want    string
	}{
		{"empty", map[string]File{}, ""},
		{"nested", map[string]File{"a/b": {}, "a/c/d": {}, "a-b": {}}, ""},
		{"file and dir", map[string]File{"a": {}, "a/b": {}}, `"a" is a file and also the parent directory`},
		{"file and deep dir", map[string]File{"a/b": {}, "a/b/c/d": {}}, `"a/b" is a file`},
		{"bad path", map[string]File{"ok": {}, "../x": {}}, `"../x"`},
		{"setuid", map[string]File{"a": {Mode: os.ModeSetuid | 0o755}}, "bits other than permission bits"},
		{"negative uid", map[string]File{"a": {UID: id(-1)}}, "owner id -1 out of range"},
		{"huge gid", map[string]File{"a": {GID: id(1 << 32)}}, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validatePayload(tt.payload)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("validatePayload = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidPayload) {
				t.Fatalf("validatePayload = %v, want ErrInvalidPayload mentioning %q", err, tt.want)
			}
		})
	}
}
