package memtrim

import (
	"testing"
	"time"
)

// manual is a clock whose timers fire only when the test steps it.
type manual struct {
	now    time.Time
	timers []timer
}

type timer struct {
	at time.Time
	f  func()
}

func (m *manual) Now() time.Time { return m.now }

func (m *manual) After(d time.Duration, f func()) {
	m.timers = append(m.timers, timer{at: m.now.Add(d), f: f})
}

// step moves the clock on by d, firing every timer that comes due (in
// order, those armed by a firing timer included).
func (m *manual) step(d time.Duration) {
	end := m.now.Add(d)
	for {
		next := -1
		for i, t := range m.timers {
			if !t.at.After(end) && (next < 0 || t.at.Before(m.timers[next].at)) {
				next = i
			}
		}
		if next < 0 {
			m.now = end
			return
		}
		t := m.timers[next]
		m.timers = append(m.timers[:next], m.timers[next+1:]...)
		m.now = t.at
		t.f()
	}
}

func TestTrimsOnceAfterQuiet(t *testing.T) {
	clk := &manual{now: time.Unix(1000, 0)}
	freed := 0
	tr := New(Config{Quiet: time.Second, Now: clk.Now, After: clk.After, Free: func() { freed++ }})

	clk.step(time.Hour)
	if freed != 0 || len(clk.timers) != 0 {
		t.Fatalf("an agent that did nothing trimmed (%d) or armed a timer", freed)
	}

	// Work keeps coming for 3 s, a Touch every 100 ms: no trim during it.
	for range 30 {
		tr.Touch()
		clk.step(100 * time.Millisecond)
	}
	if freed != 0 {
		t.Fatalf("trimmed %d times while work went on", freed)
	}
	if len(clk.timers) != 1 {
		t.Fatalf("%d timers armed by 30 touches, want 1", len(clk.timers))
	}
	clk.step(899 * time.Millisecond)
	if freed != 0 {
		t.Fatalf("trimmed %d times before a quiet second", freed)
	}
	clk.step(time.Millisecond)
	if freed != 1 {
		t.Fatalf("trims after a quiet second: %d, want 1", freed)
	}
	if len(clk.timers) != 0 {
		t.Fatal("a timer is still armed after the trim: an idle agent would wake")
	}
	clk.step(time.Hour)
	if got := tr.Trims(); got != 1 {
		t.Fatalf("trims after an idle hour: %d, want 1", got)
	}

	// The next busy period is trimmed again, once.
	tr.Touch()
	tr.Touch()
	clk.step(time.Second)
	if got := tr.Trims(); got != 2 {
		t.Fatalf("trims after the second busy period: %d, want 2", got)
	}
}

func TestDefaults(t *testing.T) {
	tr := New(Config{})
	if tr.quiet != DefaultQuiet || tr.free == nil || tr.now == nil || tr.after == nil {
		t.Fatalf("defaults not taken: %+v", tr)
	}
	tr.Touch() // a real trim a second later; must neither panic nor block
}
