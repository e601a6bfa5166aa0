package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
)

// usageLoad times bursts of set-ups while the agent's usage measurement
// has work to do: resident pods whose disk emptyDirs hold many files,
// walked every --volume-stats-period (give it with -agent-args; 0 turns
// the walks off, the baseline). The walks must not show in the bursts'
// figures: they run on their own goroutine, never on the set-up path.
func (s *scenario) usageLoad() {
	resident := s.objects(s.size.residentPods)
	createAll(s.r, s.a, s.c, resident)
	s.fill(resident, s.size.residentFiles)
	syscall.Sync() // the files' write-back must not land in a burst
	before := s.measured(resident)
	n := s.size.bursts[0]
	what := fmt.Sprintf("%d pods beside %d emptyDirs of %d files", n, len(resident), s.size.residentFiles)
	var all []time.Duration
	var cpu time.Duration // the agent's, while pods were set up
	for i := range s.size.usageBursts {
		pods := s.objects(n)
		stop := s.startProfile(fmt.Sprintf("usage-burst-%d-%d", n, i+1))
		cpu0 := s.cpuTime()
		lat, total := createAll(s.r, s.a, s.c, pods)
		cpu += s.cpuTime() - cpu0
		stop()
		s.rep.distribution(s.mode, fmt.Sprintf("burst %d of %s → each ready", i+1, what), lat, total, "")
		all = append(all, lat...)
		deleteAll(s.r, s.a, s.c, pods)
	}
	s.rep.distribution(s.mode, fmt.Sprintf("%d bursts of %s → each ready", s.size.usageBursts, what), all, 0, "")
	s.rep.value(s.mode, "agent CPU per burst, creation to last pod ready", ms(cpu/time.Duration(s.size.usageBursts)), "ms", "")
	after := s.measured(resident)
	again := 0
	for uid, t := range after {
		if !t.Equal(before[uid]) {
			again++
		}
	}
	// Proof that walks overlapped the bursts (0 with walks off).
	s.rep.value(s.mode, "resident emptyDirs measured during the bursts", float64(again), "volumes", "")
	deleteAll(s.r, s.a, s.c, resident)
}

// fill writes files of 1 KiB into each pod's emptyDir ("scratch").
func (s *scenario) fill(pods []*v1.Pod, files int) {
	dirs := make([]string, len(pods))
	for i, p := range pods {
		dirs[i] = volumePath(s.r, s.a, s.c.uid(p), "scratch")
	}
	data := make([]byte, 1024)
	forEach(len(dirs), func(i int) {
		for j := range files {
			if err := os.WriteFile(filepath.Join(dirs[i], fmt.Sprintf("f%d", j)), data, 0o644); err != nil {
				s.r.Errorf("fill %s: %v", dirs[i], err)
				return
			}
		}
	})
	if s.r.Failed() {
		s.r.Fatalf("could not fill the resident emptyDirs")
	}
}

// measured returns when the agent last measured each pod's emptyDir, as
// /v1/pods tells (whole seconds; absent when never measured).
func (s *scenario) measured(pods []*v1.Pod) map[string]time.Time {
	ours := map[string]bool{}
	for _, p := range pods {
		ours[s.c.uid(p)] = true
	}
	out := map[string]time.Time{}
	for _, p := range s.a.pods() {
		if !ours[p.UID] {
			continue
		}
		for _, v := range p.Volumes {
			if v.Name == "scratch" && v.Usage != nil {
				out[p.UID] = v.Usage.Time
			}
		}
	}
	return out
}

// cpuTime is the agent's CPU time so far (user and system).
func (s *scenario) cpuTime() time.Duration {
	u, err := readUsage(s.a.pid())
	if err != nil {
		s.r.Fatalf("agent CPU: %v", err)
	}
	return u.cpu
}
