package suggest

import "testing"

func TestNearest(t *testing.T) {
	classes := []string{"fast-ssd2", "local", "nfs", "sized", "standard"}
	for _, c := range []struct {
		word  string
		names []string
		want  string
	}{
		{"fast-ssd", classes, "fast-ssd2"}, // one short
		{"standrad", classes, "standard"},  // two neighbours swapped: one edit
		{"Local", classes, "local"},        // case
		{"sizd", classes, "sized"},         // short word, one edit
		{"nsf", classes, "nfs"},            // short word, a swap
		{"ssd", classes, ""},               // nothing close
		{"slow-hdd", classes, ""},          // nothing close
		{"lokal", classes, "local"},        // one substitution
		{"stndrd", classes, "standard"},    // two deletions
		{"sized", nil, ""},                 // no names
		{"ab", []string{"ac", "aa"}, "aa"}, // a tie: the first in byte order
		{"ab", []string{"aa", "ac"}, "aa"}, // whatever the order given
		{"", []string{"a", "bcd"}, "a"},    // empty: one insertion
		{"fast", []string{"fastest"}, ""},  // short word: three edits is far
		{"storage", []string{"Storage"}, "Storage"},
	} {
		if got := Nearest(c.word, c.names); got != c.want {
			t.Errorf("Nearest(%q, %q) = %q; want %q", c.word, c.names, got, c.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"stauts", "status", 1}, {"ab", "ba", 1}, {"abc", "ca", 3}, {"fast-ssd", "fast-ssd2", 1},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d; want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d; want %d", c.b, c.a, got, c.want)
		}
	}
}
