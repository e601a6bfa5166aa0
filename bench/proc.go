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
	cpu      time.Duration // user + system
	switches int64         // context switches of all its threads: each is a wake-up or a preemption
	rssKiB   int64
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
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		u.switches += statusField(t, "voluntary_ctxt_switches:") + statusField(t, "nonvoluntary_ctxt_switches:")
	}
	return u, nil
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
	secs := time.Since(start).Seconds()
	return idleFigures{
		Millicores:    float64(after.cpu-before.cpu) / float64(time.Millisecond) / secs,
		WakeupsPerSec: float64(after.switches-before.switches) / secs,
		RSSMiB:        float64(after.rssKiB) / 1024,
		WindowSeconds: secs,
	}
}
