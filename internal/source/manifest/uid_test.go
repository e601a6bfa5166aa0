package manifest

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestIsSafeUIDIsTheRegexp checks isSafeUID against the regular expression
// it replaced, on every string of up to three characters over an alphabet
// with each class's edges and the characters either side of them, on the
// length limits, and on random strings.
func TestIsSafeUIDIsTheRegexp(t *testing.T) {
	want := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	alphabet := []string{"a", "z", "A", "Z", "0", "9", ".", "_", "-", "/", "`", "{", "@", "[", ":", ",", " ", "\n", "\x00", "\xff", "é"}
	check := func(s string) {
		t.Helper()
		if got := isSafeUID(s); got != want.MatchString(s) {
			t.Errorf("isSafeUID(%q) = %v, the regexp says %v", s, got, !got)
		}
	}
	words := []string{""}
	for range 3 {
		var next []string
		for _, w := range words {
			for _, c := range alphabet {
				next = append(next, w+c)
			}
		}
		for _, w := range next {
			check(w)
		}
		words = next
	}
	for _, n := range []int{127, 128, 129, 300} {
		check(strings.Repeat("a", n))
		check("a" + strings.Repeat(".", n-1))
		check(strings.Repeat("a", n-1) + "/")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(140))
		for i := range b {
			b[i] = "aZ09._-/\n\x00 é"[r.IntN(13)]
		}
		check(string(b))
	}
}
