package reclaim

import (
	"strings"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	const delay = 10 * time.Minute
	aside := State{Step: Aside, DeleteAfter: now.Add(time.Minute)}
	due := State{Step: Aside, DeleteAfter: now}
	deleting := State{Step: Deleting}
	for _, tc := range []struct {
		name   string
		s      State
		f      Facts
		want   State
		action Action
	}{
		{"released, in use: wait", State{}, Facts{InUse: true}, State{}, Wait},
		{"released, wanted back: stays", State{}, Facts{Wanted: true}, State{}, Wait},
		{"released, free: aside until now+delay", State{}, Facts{}, State{Step: Aside, DeleteAfter: now.Add(delay)}, MoveAside},
		{"aside, not moved since start: move again", aside, Facts{}, aside, MoveAside},
		{"aside, moved, not due: wait", aside, Facts{MovedAside: true}, aside, Wait},
		{"aside, due: deleting", due, Facts{MovedAside: true}, deleting, Delete},
		{"aside, past due: deleting", State{Step: Aside, DeleteAfter: now.Add(-time.Hour)}, Facts{MovedAside: true}, deleting, Delete},
		{"aside, due but not moved since start: move first", due, Facts{}, due, MoveAside},
		{"aside, due, in use: wait", due, Facts{MovedAside: true, InUse: true}, due, Wait},
		{"aside, wanted: restore", aside, Facts{Wanted: true, MovedAside: true}, aside, Restore},
		{"aside, wanted, past due: restore, never delete", due, Facts{Wanted: true, MovedAside: true}, due, Restore},
		{"aside, wanted, in use: wait", aside, Facts{Wanted: true, InUse: true}, aside, Wait},
		{"deleting: delete", deleting, Facts{}, deleting, Delete},
		{"deleting, wanted: delete all the same", deleting, Facts{Wanted: true}, deleting, Delete},
		{"deleting, in use: wait", deleting, Facts{InUse: true}, deleting, Wait},
		{"unknown step: never acted on", State{Step: "Shredding"}, Facts{}, State{Step: "Shredding"}, Wait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.Now, tc.f.Delay = now, delay
			got, action := Next(tc.s, tc.f)
			if got != tc.want || action != tc.action {
				t.Errorf("Next(%+v, %+v) = %+v, %q; want %+v, %q", tc.s, tc.f, got, action, tc.want, tc.action)
			}
		})
	}
}

func TestZeroDelayGoesStraightThrough(t *testing.T) {
	now := time.Now()
	s, a := Next(State{}, Facts{Now: now})
	if a != MoveAside {
		t.Fatalf("first action %q, want %q", a, MoveAside)
	}
	s, a = Next(s, Facts{Now: now, MovedAside: true})
	if s.Step != Deleting || a != Delete {
		t.Fatalf("after the move: %+v, %q; want Deleting, %q", s, a, Delete)
	}
}

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		s  State
		ok bool
	}{
		{State{}, true},
		{State{Step: Aside, DeleteAfter: time.Now()}, true},
		{State{Step: Aside}, false},
		{State{Step: Deleting}, true},
		{State{Step: "Shredding"}, false},
	} {
		if err := Valid(tc.s); (err == nil) != tc.ok {
			t.Errorf("Valid(%+v) = %v, want ok=%v", tc.s, err, tc.ok)
		}
	}
}

func TestDueAndRestorable(t *testing.T) {
	at := time.Now()
	if !Due(State{Step: Aside, DeleteAfter: at}).Equal(at) || !Due(State{}).IsZero() || !Due(State{Step: Deleting}).IsZero() {
		t.Error("Due: want DeleteAfter for Aside only")
	}
	if !Restorable(State{}) || !Restorable(State{Step: Aside}) || Restorable(State{Step: Deleting}) {
		t.Error("Restorable: want Released and Aside only")
	}
}

// TestDeleteNow: only storage aside, moved, not in use and not wanted
// back is deleted early; everything else is refused, saying its step.
func TestDeleteNow(t *testing.T) {
	aside := State{Step: Aside, DeleteAfter: time.Now().Add(time.Hour)}
	for _, tc := range []struct {
		name    string
		s       State
		f       Facts
		wantErr string
	}{
		{"aside, moved, free: deleting", aside, Facts{MovedAside: true}, ""},
		{"released, in use", State{}, Facts{InUse: true}, "still in place: a pod on this node has it set up"},
		{"released, free", State{}, Facts{}, "not moved aside yet"},
		{"aside, wanted back", aside, Facts{MovedAside: true, Wanted: true}, "its claim is back"},
		{"aside, in use", aside, Facts{MovedAside: true, InUse: true}, "a pod on this node has its storage set up"},
		{"aside, not moved since start", aside, Facts{}, "being moved aside again"},
		{"deleting", State{Step: Deleting}, Facts{MovedAside: true}, "being deleted already"},
		{"unknown step", State{Step: "Shredding"}, Facts{MovedAside: true}, "unknown reclaim step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeleteNow(tc.s, tc.f)
			switch {
			case tc.wantErr == "" && (err != nil || got != State{Step: Deleting}):
				t.Errorf("DeleteNow = %+v, %v; want Deleting", got, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || got != tc.s):
				t.Errorf("DeleteNow = %+v, %v; want %+v unchanged and an error with %q", got, err, tc.s, tc.wantErr)
			}
		})
	}
}
