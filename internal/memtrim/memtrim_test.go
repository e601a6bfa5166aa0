package memtrim

import (
	"fmt"
	"math"
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
	if tr.quiet != DefaultQuiet || tr.free == nil || tr.now == nil || tr.after == nil ||
		tr.busy.percent != DefaultBusyGCPercent || tr.busy.limit != DefaultBusyMemoryLimit || tr.busy.setGCPercent == nil || tr.busy.setMemoryLimit == nil {
		t.Fatalf("defaults not taken: %+v", tr)
	}
	tr.Touch() // a real trim a second later; must neither panic nor block
}

// collector is a fake of the GC settings: what GOGC and the memory limit
// are, and the order of the calls that set them.
type collector struct {
	percent int
	limit   int64
	calls   []string
}

func (c *collector) setGCPercent(p int) int {
	old := c.percent
	c.percent = p
	c.calls = append(c.calls, fmt.Sprintf("gogc %d", p))
	return old
}

func (c *collector) setMemoryLimit(l int64) int64 {
	old := c.limit
	if l >= 0 {
		c.limit = l
		c.calls = append(c.calls, fmt.Sprintf("limit %d", l))
	}
	return old
}

// TestLessGCWhileBusy: from the first Touch after quiet until the trim,
// GOGC is BusyGCPercent and the memory limit BusyMemoryLimit; the trim puts
// both back before it collects, and the next busy period raises them
// again. An idle agent runs with the operator's settings.
func TestLessGCWhileBusy(t *testing.T) {
	clk := &manual{now: time.Unix(1000, 0)}
	gc := &collector{percent: 100, limit: math.MaxInt64}
	var atFree []string
	tr := New(Config{Quiet: time.Second, Now: clk.Now, After: clk.After, SetGCPercent: gc.setGCPercent, SetMemoryLimit: gc.setMemoryLimit,
		Free: func() { atFree = append(atFree, fmt.Sprint(gc.percent, gc.limit)) }})
	for round := range 2 {
		for range 5 {
			tr.Touch()
			clk.step(100 * time.Millisecond)
			if gc.percent != DefaultBusyGCPercent || gc.limit != DefaultBusyMemoryLimit {
				t.Fatalf("round %d, while busy: GOGC %d, limit %d; want %d and %d", round, gc.percent, gc.limit, DefaultBusyGCPercent, DefaultBusyMemoryLimit)
			}
		}
		clk.step(time.Second)
		if gc.percent != 100 || gc.limit != math.MaxInt64 {
			t.Fatalf("round %d, after the trim: GOGC %d, limit %d; want them back", round, gc.percent, gc.limit)
		}
		if want := fmt.Sprint(100, int64(math.MaxInt64)); len(atFree) != round+1 || atFree[round] != want {
			t.Fatalf("round %d: settings at the trims %q, want %q last: the trim collects with them back", round, atFree, want)
		}
	}
	if len(gc.calls) != 8 { // 2 rounds × (raise GOGC, set limit, restore limit, restore GOGC)
		t.Errorf("settings changed %d times in two busy periods, want 8: %q", len(gc.calls), gc.calls)
	}
}

// TestOperatorSettingsKept: a GOGC already as high or off is not changed,
// nor a memory limit the operator set (GOMEMLIMIT); a negative
// BusyGCPercent changes nothing.
func TestOperatorSettingsKept(t *testing.T) {
	tests := []struct {
		name           string
		percent        int
		limit          int64
		busy           int
		wantP          int
		wantL          int64
		wantRestoredTo int
	}{
		{"GOGC off", -1, math.MaxInt64, 0, -1, math.MaxInt64, -1},
		{"GOGC higher", 800, math.MaxInt64, 0, 800, math.MaxInt64, 800},
		{"GOMEMLIMIT set", 100, 200 << 20, 0, DefaultBusyGCPercent, 200 << 20, 100},
		{"busy GC off", 100, math.MaxInt64, -1, 100, math.MaxInt64, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &manual{now: time.Unix(1000, 0)}
			gc := &collector{percent: tt.percent, limit: tt.limit}
			tr := New(Config{Quiet: time.Second, Now: clk.Now, After: clk.After, Free: func() {}, BusyGCPercent: tt.busy,
				SetGCPercent: gc.setGCPercent, SetMemoryLimit: gc.setMemoryLimit})
			tr.Touch()
			if gc.percent != tt.wantP || gc.limit != tt.wantL {
				t.Errorf("while busy: GOGC %d, limit %d; want %d and %d", gc.percent, gc.limit, tt.wantP, tt.wantL)
			}
			clk.step(time.Second)
			if gc.percent != tt.wantRestoredTo || gc.limit != tt.limit {
				t.Errorf("after the trim: GOGC %d, limit %d; want %d and %d", gc.percent, gc.limit, tt.wantRestoredTo, tt.limit)
			}
		})
	}
}

// TestEnvironmentSettingsKept: GOGC or GOMEMLIMIT in the environment is
// the operator's choice: the busy settings never replace it.
func TestEnvironmentSettingsKept(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv("GOGC", "")
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv(env, map[string]string{"GOGC": "50", "GOMEMLIMIT": "200MiB"}[env])
			clk := &manual{now: time.Unix(1000, 0)}
			gc := &collector{percent: 50, limit: math.MaxInt64}
			tr := New(Config{Quiet: time.Second, Now: clk.Now, After: clk.After, Free: func() {},
				SetGCPercent: gc.setGCPercent, SetMemoryLimit: gc.setMemoryLimit})
			tr.Touch()
			if gc.percent != 50 || gc.limit != math.MaxInt64 {
				t.Errorf("while busy with %s set: GOGC %d, limit %d; want both as they were", env, gc.percent, gc.limit)
			}
			clk.step(time.Second)
			if gc.percent != 50 || gc.limit != math.MaxInt64 {
				t.Errorf("after the trim: GOGC %d, limit %d; want both as they were", gc.percent, gc.limit)
			}
		})
	}
}

// TestBusyLimitNeverBelowTwiceTheLiveHeap: with more than 32 MiB live, the
// busy limit is twice the live heap, never less than GOGC 100 would allow
// (the collector would otherwise run back to back while busy); with less,
// it is the default.
func TestBusyLimitNeverBelowTwiceTheLiveHeap(t *testing.T) {
	for _, tt := range []struct {
		live uint64
		want int64
	}{{8 << 20, DefaultBusyMemoryLimit}, {100 << 20, 200 << 20}} {
		clk := &manual{now: time.Unix(1000, 0)}
		gc := &collector{percent: 100, limit: math.MaxInt64}
		tr := New(Config{Quiet: time.Second, Now: clk.Now, After: clk.After, Free: func() {},
			SetGCPercent: gc.setGCPercent, SetMemoryLimit: gc.setMemoryLimit, LiveHeap: func() uint64 { return tt.live }})
		tr.Touch()
		if gc.limit != tt.want {
			t.Errorf("live heap %d MiB: busy limit %d MiB, want %d MiB", tt.live>>20, gc.limit>>20, tt.want>>20)
		}
		clk.step(time.Second)
		if gc.limit != math.MaxInt64 {
			t.Errorf("live heap %d MiB: limit after the trim %d, want none", tt.live>>20, gc.limit)
		}
	}
}
