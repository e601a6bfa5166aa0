package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// report is what a run writes: the machine, the date, the commit and the
// figures.
type report struct {
	Machine machine        `json:"machine"`
	Date    time.Time      `json:"date"`
	Commit  string         `json:"commit"`
	Agent   string         `json:"agent,omitempty"` // a binary given with -agent instead of the commit's
	RootFS  string         `json:"root_fs"`         // file system of the agents' root directories
	Size    string         `json:"size"`
	Figures []figure       `json:"figures"`
	Kubelet []kubeletRound `json:"kubelet_side_by_side,omitempty"` // -scenario kubelet
	// Syscalls are the system calls of the traced burst (-syscalls).
	Syscalls []syscallStep `json:"syscalls,omitempty"`
	Errors   []string      `json:"errors,omitempty"`
}

type machine struct {
	Cores     int     `json:"cores"`
	MemoryGiB float64 `json:"memory_gib"`
	Kernel    string  `json:"kernel"`
	CPU       string  `json:"cpu"`
	Go        string  `json:"go"`
}

// figure is one measurement: a distribution (Dist) or a single value.
type figure struct {
	Mode  string        `json:"mode"` // "manifest" or "cluster"
	Name  string        `json:"name"`
	Dist  *dist         `json:"latency,omitempty"`
	Total float64       `json:"total_ms,omitempty"` // first start to last end, for bursts
	Idle  *idleFigures  `json:"idle,omitempty"`
	Decay *decayFigures `json:"decay,omitempty"`
	// Requests are API requests by verb and resource (cluster mode).
	Requests map[string]float64 `json:"api_requests,omitempty"`
	Value    *float64           `json:"value,omitempty"`
	Unit     string             `json:"unit,omitempty"`
	Target   string             `json:"target,omitempty"`
}

func (r *report) add(f figure) { r.Figures = append(r.Figures, f) }

func (r *report) distribution(mode, name string, lat []time.Duration, total time.Duration, target string) {
	d := summarize(lat)
	r.add(figure{Mode: mode, Name: name, Dist: &d, Total: ms(total), Target: target})
}

func (r *report) value(mode, name string, v float64, unit, target string) {
	r.add(figure{Mode: mode, Name: name, Value: &v, Unit: unit, Target: target})
}

// table writes the figures for people.
func (r *report) table(w io.Writer) {
	fmt.Fprintf(w, "volume-agent benchmarks, %s, commit %s, size %s\n", r.Date.Format(time.DateOnly), r.Commit, r.Size)
	if r.Agent != "" {
		fmt.Fprintf(w, "agent binary %s (not built from the commit)\n", r.Agent)
	}
	fmt.Fprintf(w, "%d cores (%s), %.1f GiB, Linux %s, %s; root directories on %s\n\n", r.Machine.Cores, r.Machine.CPU, r.Machine.MemoryGiB, r.Machine.Kernel, r.Machine.Go, r.RootFS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Figures) > 0 {
		fmt.Fprintln(tw, "mode\twhat\tp50\tp99\tmax / value\tn\ttarget")
	}
	for _, f := range r.Figures {
		switch {
		case f.Dist != nil:
			total := ""
			if f.Total > 0 && f.Dist.N > 1 {
				total = fmt.Sprintf(" (all: %.1f ms)", f.Total)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1f ms\t%.1f ms\t%.1f ms%s\t%d\t%s\n", f.Mode, f.Name, f.Dist.P50, f.Dist.P99, f.Dist.Max, total, f.Dist.N, f.Target)
		case f.Idle != nil:
			fmt.Fprintf(tw, "%s\t%s\t\t\t%.1f millicores, %.1f wake-ups/s, RSS %.1f MiB (anonymous %.1f)\t\t%s\n", f.Mode, f.Name, f.Idle.Millicores, f.Idle.WakeupsPerSec, f.Idle.RSSMiB, f.Idle.RSSAnonMiB, f.Target)
		case f.Decay != nil:
			fmt.Fprintf(tw, "%s\t%s\t\t\tfrom %d on: %.1f millicores, %.1f wake-ups/s\t\t%s\n", f.Mode, f.Name, decaySettledFrom, f.Decay.SettledMillicores, f.Decay.SettledWakeupsPerSec, f.Target)
			fmt.Fprintf(tw, "\t  millicores each\t\t\t%s\t\t\n", series(f.Decay.Millicores))
			fmt.Fprintf(tw, "\t  wake-ups/s each\t\t\t%s\t\t\n", series(f.Decay.WakeupsPerSec))
		case f.Requests != nil: // too wide for a column: written after the table
		case f.Value != nil:
			fmt.Fprintf(tw, "%s\t%s\t\t\t%.4g %s\t\t%s\n", f.Mode, f.Name, *f.Value, f.Unit, f.Target)
		}
	}
	_ = tw.Flush()
	for _, f := range r.Figures {
		if f.Requests != nil {
			fmt.Fprintf(w, "%s  %s: %s\n", f.Mode, f.Name, requestsString(f.Requests))
		}
	}
	r.kubeletTable(w)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "\nERROR: %s\n", e)
	}
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func describeMachine() machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		m.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryGiB = float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return m
}

// fileSystem names the file system dir is on, the cost of every mkdir,
// symlink and rename an agent makes there.
func fileSystem(dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	names := map[int64]string{unix.EXT4_SUPER_MAGIC: "ext4", unix.TMPFS_MAGIC: "tmpfs", unix.XFS_SUPER_MAGIC: "xfs",
		unix.BTRFS_SUPER_MAGIC: "btrfs", unix.OVERLAYFS_SUPER_MAGIC: "overlay"}
	name, ok := names[int64(st.Type)]
	if !ok {
		name = fmt.Sprintf("type %#x", st.Type)
	}
	return fmt.Sprintf("%s (%s)", name, dir)
}

// commit names the checked-out commit, marked when the tree has changes.
func commit(dir string) string {
	out, err := exec.Command("git", "-C", dir, "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
