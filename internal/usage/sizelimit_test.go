package usage

import (
	"errors"
	"slices"
	"testing"
)

// reports is a Reporter that keeps what it is told.
type reports struct{ got []Stat }

func (r *reports) SizeLimitExceeded(s Stat) { r.got = append(r.got, s) }

// TestSizeLimitReportedOncePerCrossing: a volume passing its size limit is
// reported when a measurement above it follows one below it (or none), not
// at every measurement above it; a failed measurement changes nothing.
func TestSizeLimitReportedOncePerCrossing(t *testing.T) {
	const limit = 1 << 20
	type step struct {
		used uint64
		err  error
	}
	failed := step{err: errors.New("walk failed")}
	for _, tc := range []struct {
		name  string
		limit int64
		steps []step
		want  []int // the steps reported
	}{
		{"first measurement above", limit, []step{{used: 2 << 20}, {used: 3 << 20}}, []int{0}},
		{"at the limit is not above", limit, []step{{used: limit}, {used: limit + 1}}, []int{1}},
		{"under, over, over, under, over", limit, []step{{used: 1}, {used: 2 << 20}, {used: 2 << 20}, {used: 1}, {used: 2 << 20}}, []int{1, 4}},
		{"a failure in between", limit, []step{{used: 2 << 20}, failed, {used: 2 << 20}}, []int{0}},
		{"no limit", 0, []step{{used: 1}, {used: 1 << 40}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &reports{}
			u := New(Config{Reporter: r})
			tg := Target{Key: dsw0, Volume: "v", SizeLimit: tc.limit}
			s := &slot{target: tg}
			var reported []int
			for i, st := range tc.steps {
				n := len(r.got)
				if crossed, stat := u.record(s, tg, Measurement{UsedBytes: st.used}, st.err == nil, st.err); crossed {
					u.cfg.Reporter.SizeLimitExceeded(stat)
				}
				if len(r.got) > n {
					reported = append(reported, i)
				}
			}
			if !slices.Equal(reported, tc.want) {
				t.Errorf("reported at steps %v, want %v", reported, tc.want)
			}
			for _, st := range r.got {
				if !st.Exceeded() || st.SizeLimitBytes != tc.limit || st.Volume != "v" {
					t.Errorf("reported %+v", st)
				}
			}
		})
	}
}

func TestExceededMessage(t *testing.T) {
	m := Measurement{UsedBytes: 2 << 20, SizeLimitBytes: 1 << 20}
	want := `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi": 2097152 bytes used`
	if got := ExceededMessage("scratch", m); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got := LimitString(1000000000); got != "1G" {
		t.Errorf("LimitString(1e9) = %q, want 1G", got)
	}
}
