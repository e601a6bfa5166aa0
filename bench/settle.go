package main

import (
	"fmt"
	"time"
)

// usage reads the agent's use of the machine so far.
func (s *scenario) usage() usage {
	u, err := readUsage(s.a.pid())
	if err != nil {
		s.r.Fatalf("agent usage: %v", err)
	}
	return u
}

// agentCPU reports the agent's CPU (user and system, see cpuBetween) per
// pod over a step of a burst of n pods, from its first create or delete
// to its last pod ready or torn down; it includes answering the long
// polls, as the floor's figure includes nothing but the file system.
func (s *scenario) agentCPU(step string, n int, before, after usage) {
	perPod := float64(cpuBetween(before, after)) / float64(time.Millisecond) / float64(n)
	key := fmt.Sprintf("%s %d", step, n)
	if s.cpuPerPod == nil {
		s.cpuPerPod = map[string][]float64{}
	}
	s.cpuPerPod[key] = append(s.cpuPerPod[key], perPod)
	s.rep.value(s.mode, fmt.Sprintf("agent: CPU per pod %s (%d at once)", step, n), perPod, "ms", "")
}

// overFloor reports the agent's mean CPU per pod for a step of the bursts
// of n pods less the floor's for the same step, measured in the same run
// on the same file system: what the agent costs beyond the file system's
// work (target 1 of issue 31 for set-ups on tmpfs).
func (s *scenario) overFloor(step string, n int, floor float64, target string) {
	runs := s.cpuPerPod[fmt.Sprintf("%s %d", step, n)]
	if len(runs) == 0 {
		return
	}
	var sum float64
	for _, v := range runs {
		sum += v
	}
	mean := sum / float64(len(runs))
	s.rep.value(s.mode, fmt.Sprintf("agent: CPU per pod %s (%d at once), mean of %d bursts", step, n, len(runs)), mean, "ms", "")
	s.rep.value(s.mode, fmt.Sprintf("agent − floor: CPU per pod %s (%d at once)", step, n), mean-floor, "ms", target)
}

// waitQuiet waits until the agent has used less than 5 % of a CPU in each
// of two 50 ms windows in a row, at most 10 s, so that a burst measures
// its pods rather than the agent still reading the objects written just
// before them (what then remains to read is only what the pods bring).
func (s *scenario) waitQuiet(after string) {
	const (
		window  = 50 * time.Millisecond
		busy    = window / 20
		longest = 10 * time.Second
	)
	start := time.Now()
	quiet := 0
	last := s.usage()
	for quiet < 2 {
		if time.Since(start) > longest {
			s.r.Logf("bench: agent still busy %v after %s; the burst starts anyway", longest, after)
			return
		}
		time.Sleep(window)
		u := s.usage()
		if u.onCPU-last.onCPU < busy {
			quiet++
		} else {
			quiet = 0
		}
		last = u
	}
	s.r.Logf("bench: agent quiet %v after %s", time.Since(start).Round(time.Millisecond), after)
}

// apiRequests reads the API server's request counts (cluster mode), or
// nil.
func (s *scenario) apiRequests() map[string]float64 {
	rc, ok := s.c.(requestCounter)
	if !ok {
		return nil
	}
	reqs, err := rc.requests()
	if err != nil {
		s.r.Logf("bench: %v (no request counts)", err)
		return nil
	}
	return reqs
}

// settle follows the agent from the last pod of a burst of n ready, one
// interval (1 s at full size) at a time for 12 intervals: its CPU and
// wake-ups each interval, the same from 2 intervals on (once settled), the
// idle figures of that window as before, and in cluster mode the API
// server's requests by kind from before the burst (reqs) to 2 intervals
// after, and from there to the end.
func (s *scenario) settle(n int, reqs map[string]float64) {
	every := s.size.idle / 10
	const intervals = 12
	from := "the last pod ready"
	if s.profile != "" {
		from = "the end of the burst's 20 s CPU profile"
	}
	var atSettled, atEnd map[string]float64
	readings := measureDecay(s.r, s.a.pid(), every, intervals, func(i int, _ usage) {
		switch {
		case reqs == nil:
		case i == decaySettledFrom:
			atSettled = s.apiRequests()
		case i == intervals:
			atEnd = s.apiRequests()
		}
	})
	d := decay(readings, every)
	target := ""
	if s.mode == "cluster" {
		target = "from 2 s: ≤ 1 millicore, ≤ 10 wake-ups/s"
	}
	s.rep.add(figure{Mode: s.mode, Name: fmt.Sprintf("after the burst of %d pods, each %v from %s", n, every, from), Decay: &d, Target: target})
	s.addIdle(n, idleBetween(readings[decaySettledFrom], readings[intervals], (intervals-decaySettledFrom)*every))
	if atSettled != nil {
		s.rep.add(figure{Mode: s.mode, Name: fmt.Sprintf("API requests, from before the burst of %d pods to %v after %s", n, decaySettledFrom*every, from), Requests: requestsBetween(reqs, atSettled, reqs)})
	}
	if atSettled != nil && atEnd != nil {
		s.rep.add(figure{Mode: s.mode, Name: fmt.Sprintf("API requests, from %v to %v after %s", decaySettledFrom*every, intervals*every, from), Requests: requestsBetween(atSettled, atEnd, reqs)})
	}
}
