package evidence

import (
	"strings"
	"testing"
	"time"
)

func TestRemoved(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	hold := 750 * time.Millisecond
	manifests := Listing{Source: "manifests", Synced: true, Since: t0}
	for _, tc := range []struct {
		name    string
		l       Listing
		a       Absence
		now     time.Time
		removed bool
		why     string
		due     time.Time
	}{
		{name: "not synced", l: Listing{Source: "api", Authoritative: true}, now: t0, why: "not synced"},
		{name: "authoritative", l: Listing{Source: "api", Synced: true, Authoritative: true}, now: t0, removed: true},
		{name: "seen, just removed", l: manifests, a: Absence{Seen: true, Since: t0}, now: t0.Add(time.Millisecond),
			why: "removed since 10:00:00.000", due: t0.Add(hold)},
		{name: "seen, removal held", l: manifests, a: Absence{Seen: true, Since: t0}, now: t0.Add(hold), removed: true},
		{name: "seen, the source now empty", l: Listing{Source: "manifests", Synced: true}, a: Absence{Seen: true, Since: t0},
			now: t0.Add(hold), removed: true},
		{name: "absent at start, empty source", l: Listing{Source: "manifests", Synced: true}, now: t0.Add(time.Hour),
			why: "has listed nothing since"},
		{name: "absent at start, listing for a moment", l: manifests, now: t0.Add(100 * time.Millisecond),
			why: "has listed objects since 10:00:00.000", due: t0.Add(hold)},
		{name: "absent at start, listing held", l: manifests, now: t0.Add(hold), removed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Removed(tc.l, tc.a, tc.now, hold)
			if v.Removed != tc.removed || !strings.Contains(v.Why, tc.why) || !v.Due.Equal(tc.due) || (v.Removed && v.Why != "") {
				t.Fatalf("Removed = %+v, want removed %v, a reason containing %q, due %v", v, tc.removed, tc.why, tc.due)
			}
		})
	}
}

func TestSame(t *testing.T) {
	for _, tc := range []struct {
		a, b Owner
		want bool
	}{
		{Owner{UID: "u"}, Owner{UID: "u"}, true},
		{Owner{UID: "u", Nonce: "1"}, Owner{UID: "u", Nonce: "1"}, true},
		{Owner{UID: "u", Nonce: "1"}, Owner{UID: "u", Nonce: "2"}, false},
		{Owner{UID: "u", Nonce: "1"}, Owner{UID: "u"}, false},
		{Owner{UID: "u"}, Owner{UID: "v"}, false},
		{Owner{}, Owner{}, false},
		{Owner{Nonce: "1"}, Owner{Nonce: "1"}, false},
	} {
		if got := Same(tc.a, tc.b); got != tc.want {
			t.Errorf("Same(%+v, %+v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	if a, b := NewNonce(), NewNonce(); a == b || len(a) != 32 {
		t.Errorf("NewNonce gave %q and %q", a, b)
	}
}
