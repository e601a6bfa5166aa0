package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// usage is what /proc says a process has used so far.
type usage struct {
	cpu      time.Duration // user + system, in clock ticks (10 ms)
	switches int64         // context switches of all its threads: each is a wake-up or a preemption
	rssKiB   int64
	anonKiB  int64 // RssAnon: the heap, stacks and the runtime's; the rest of the RSS is the binary's file pages
	// onCPU is the time its live threads have run, to the nanosecond
	// (/proc/PID/task/*/schedstat): fine enough for a second's sample at
	// rest, where a clock tick is 10 millicores. A thread that ended takes
	// its time with it; the Go runtime does not end threads.
	onCPU time.Duration
}

func readUsage(pid int) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name may hold spaces: the fields start after its ")".
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	u.cpu = time.Duration(utime+stime) * time.Second / clockTicks
	u.rssKiB = statusField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
	u.anonKiB = statusField(fmt.Sprintf("/proc/%d/status", pid), "RssAnon:")
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, t := range tasks {
		u.switches += statusField(t+"/status", "voluntary_ctxt_switches:") + statusField(t+"/status", "nonvoluntary_ctxt_switches:")
		u.onCPU += schedstatRun(t + "/schedstat")
	}
	return u, nil
}

// schedstatRun is the first field of a task's schedstat: the time it has
// run on a CPU, in nanoseconds.
func schedstatRun(path string) time.Duration {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(n)
}

// statusField reads the number after key in a /proc status file.
func statusField(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// idle measures the agent's CPU and wake-ups over window, with nothing
// changing, and its RSS at the end.
type idleFigures struct {
	Millicores    float64 `json:"millicores"`
	WakeupsPerSec float64 `json:"wakeups_per_second"`
	RSSMiB        float64 `json:"rss_mib"`
	RSSAnonMiB    float64 `json:"rss_anon_mib"`
	WindowSeconds float64 `json:"window_seconds"`
}

func measureIdle(r *runner, pid int, window time.Duration) idleFigures {
	before, err := readUsage(pid)
	if err != nil {
		r.Fatalf("usage of %d: %v", pid, err)
	}
	start := time.Now()
	time.Sleep(window)
	after, err := readUsage(pid)
	if err != nil {
		r.Fatalf("usage of %d: %v", pid, err)
	}
	return idleBetween(before, after, time.Since(start))
}

// cpuBetween is the CPU (user and system) a process used between two
// readings: the nanosecond sum of its threads' run time, unless a thread
// ended meanwhile and took its time with it, which the clock ticks of
// /proc/PID/stat keep: then they say more, by more than their 2 ticks of
// rounding, and are the answer.
func cpuBetween(before, after usage) time.Duration {
	precise, ticks := after.onCPU-before.onCPU, after.cpu-before.cpu
	if ticks > precise+2*time.Second/clockTicks {
		return ticks
	}
	return precise
}

// idleBetween is the idle figures of a window from two readings of /proc.
func idleBetween(before, after usage, window time.Duration) idleFigures {
	secs := window.Seconds()
	return idleFigures{
		Millicores:    float64(cpuBetween(before, after)) / float64(time.Millisecond) / secs,
		WakeupsPerSec: float64(after.switches-before.switches) / secs,
		RSSMiB:        float64(after.rssKiB) / 1024,
		RSSAnonMiB:    float64(after.anonKiB) / 1024,
		WindowSeconds: secs,
	}
}
