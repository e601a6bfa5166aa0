package btrfs

import (
	"strings"
	"testing"
)

// btrfs-progs 6.x with -re and -f; older ones print no Path column.
const (
	showWithPath = `Qgroupid    Referenced    Exclusive  Max referenced  Max exclusive   Path 
--------    ----------    ---------  --------------  -------------   ---- 
0/5              16384        16384            none           none   <toplevel>
0/256         10469376     10465280        10485760           none   vol
0/2560             42           42            none           none   other
`
	showWithoutPath = `qgroupid         rfer         excl     max_rfer     max_excl 
--------         ----         ----     --------     -------- 
0/257         5259264      5259264     50000000         none 
`
)

func TestParseQgroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		id   uint64
		want Qgroup
		err  string // a part of the error; "" for none
	}{
		{"limited", showWithPath, 256, Qgroup{ID: 256, Referenced: 10469376, Exclusive: 10465280, Limit: 10485760, Limited: true}, ""},
		{"no limit", showWithPath, 5, Qgroup{ID: 5, Referenced: 16384, Exclusive: 16384}, ""},
		{"no prefix match", showWithPath, 25, Qgroup{}, "qgroup 0/25 is not listed by btrfs qgroup show"},
		{"older btrfs-progs", showWithoutPath, 257, Qgroup{ID: 257, Referenced: 5259264, Exclusive: 5259264, Limit: 50000000, Limited: true}, ""},
		{"id 0: the first level-0 row", showWithoutPath, 0, Qgroup{ID: 257, Referenced: 5259264, Exclusive: 5259264, Limit: 50000000, Limited: true}, ""},
		{"empty", "", 0, Qgroup{}, "qgroup 0/0 is not listed"},
		{"referenced no number", "0/257 x 0 100 none", 257, Qgroup{}, "referenced bytes"},
		{"exclusive no number", "0/257 1 x 100 none", 257, Qgroup{}, "exclusive bytes"},
		{"limit no number", "0/257 1 1 lots none", 257, Qgroup{}, "referenced limit"},
		{"too few columns (no -re)", "0/257 1 1", 257, Qgroup{}, "is not listed"},
	} {
		got, err := parseQgroup(tc.out, tc.id)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: parseQgroup(0/%d) = %+v, %v; want %+v", tc.name, tc.id, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: parseQgroup(0/%d) = %+v, %v; want an error saying %q", tc.name, tc.id, got, err, tc.err)
		}
	}
}
