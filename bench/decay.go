package main

import (
	"fmt"
	"strings"
	"time"
)

// decayFigures is what the agent did in each interval after a burst, from
// the moment its last pod was ready: how fast its work dies down, and what
// it still does once settled.
type decayFigures struct {
	IntervalSeconds float64 `json:"interval_seconds"` // 1 s at full size
	// Millicores and WakeupsPerSec are one value an interval, the first
	// from the last pod ready to one interval later. CPU is the time the
	// agent's threads ran (schedstat, to the nanosecond).
	Millicores    []float64 `json:"millicores"`
	WakeupsPerSec []float64 `json:"wakeups_per_second"`
	// Settled are the same from 2 intervals after the last pod ready to
	// the end: what runs once the burst has settled.
	SettledMillicores    float64 `json:"settled_millicores"`
	SettledWakeupsPerSec float64 `json:"settled_wakeups_per_second"`
}

// decaySettledFrom is the interval from which the burst counts as settled.
const decaySettledFrom = 2

// measureDecay reads the agent's usage at the start and after each of
// intervals intervals of length every, calling at(i, u) after reading i
// (0 the start), and returns the readings.
func measureDecay(r *runner, pid int, every time.Duration, intervals int, at func(i int, u usage)) []usage {
	start := time.Now()
	out := make([]usage, 0, intervals+1)
	for i := 0; i <= intervals; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
		u, err := readUsage(pid)
		if err != nil {
			r.Fatalf("usage of %d: %v", pid, err)
		}
		out = append(out, u)
		if at != nil {
			at(i, u)
		}
	}
	return out
}

// decay turns readings taken every interval into the figures.
func decay(readings []usage, every time.Duration) decayFigures {
	d := decayFigures{IntervalSeconds: every.Seconds()}
	secs := every.Seconds()
	for i := 1; i < len(readings); i++ {
		d.Millicores = append(d.Millicores, millicores(readings[i].onCPU-readings[i-1].onCPU, secs))
		d.WakeupsPerSec = append(d.WakeupsPerSec, float64(readings[i].switches-readings[i-1].switches)/secs)
	}
	if n := len(readings) - 1; n > decaySettledFrom {
		first, last := readings[decaySettledFrom], readings[n]
		window := float64(n-decaySettledFrom) * secs
		d.SettledMillicores = millicores(last.onCPU-first.onCPU, window)
		d.SettledWakeupsPerSec = float64(last.switches-first.switches) / window
	}
	return d
}

// millicores is CPU time used over secs seconds, in thousandths of a CPU;
// never below 0 (a thread that ended took its time with it).
func millicores(cpu time.Duration, secs float64) float64 {
	return max(0, float64(cpu)/float64(time.Millisecond)/secs)
}

// series formats one value an interval for the table.
func series(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(parts, " ")
}
