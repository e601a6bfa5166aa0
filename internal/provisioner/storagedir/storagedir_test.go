package storagedir

import (
	"strings"
	"testing"
)

func TestValidRel(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want string // "" when valid, else part of the error
	}{
		{"claim", ""},
		{"ns/claim", ""},
		{"a/b/c", ""},
		{strings.Repeat("x", 255), ""},
		{"", "not the base itself"},
		{".", "not the base itself"},
		{"/etc", "relative"},
		{"..", `".."`},
		{"../x", `".."`},
		{"a/..", "not clean"},
		{"a/../b", "not clean"},
		{"a//b", "not clean"},
		{"a/", "not clean"},
		{"./a", "not clean"},
		{"a\x00b", "NUL"},
		{"ns/" + strings.Repeat("x", 256), "longer than 255"},
	} {
		err := ValidRel(tc.rel)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ValidRel(%q) = %v, want nil", tc.rel, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ValidRel(%q) = %v, want an error with %q", tc.rel, err, tc.want)
		}
	}
}
