package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/volume-agent/volume-agent/internal/status"
)

const statusUsage = `Usage: volume-agent status [--addr ADDR] [-o table|wide|json]

Shows the pods a running agent serves and the state of each of their
volumes, read from its status endpoint (GET /v1/pods). Nothing is changed.

-o table (the default) has one row per volume, sorted by pod then volume:
  POD     namespace/name
  VOLUME  the volume's name in the pod's spec (<none> for a pod without volumes)
  PLUGIN  the plugin serving it (- when none does)
  STATE   Pending, Mounted, Failed or Unsupported
  AGE     how long it has been in that state
  ERROR   why it is not Mounted, or why its last refresh failed; cut to
          80 characters (-o json has it in full)
-o wide adds the pod's UID (for volume-agent wait) and the volume's path on
the host. -o json prints the endpoint's answer as it is.

Exit codes:
  0  the status was shown
  2  bad arguments
  3  the agent could not be reached, or its answer was not understood

Flags:
`

// statusTimeout bounds the one request of status.
const statusTimeout = 10 * time.Second

// maxErrorWidth is where the table cuts an error.
const maxErrorWidth = 80

func runStatus(env cmdEnv, args []string) int {
	return listCommand[status.Pod]{name: "status", usage: statusUsage, path: "/v1/pods", key: "pods",
		none: "No pods on this agent.", write: writeTable}.run(env, args)
}

// writeTable writes one row per volume (per pod without volumes), sorted
// by namespace, name and UID, then volume.
func writeTable(env cmdEnv, pods []status.Pod, wide bool) {
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b status.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	rows := [][]string{{"POD", "VOLUME", "PLUGIN", "STATE", "AGE", "ERROR"}}
	if wide {
		rows[0] = []string{"POD", "UID", "VOLUME", "PLUGIN", "STATE", "AGE", "PATH", "ERROR"}
	}
	now := env.now()
	for _, p := range pods {
		for _, v := range volumeRows(p) {
			row := []string{p.Namespace + "/" + p.Name, v.Name, orDash(v.Plugin), orDash(v.State), age(now, v.Since), cut(v.Error, maxErrorWidth)}
			if wide {
				row = slices.Insert(row, 1, p.UID)
				row = slices.Insert(row, 6, orDash(v.Path))
			}
			rows = append(rows, row)
		}
	}
	writeAligned(env.stdout, rows)
}

// writeAligned writes rows in aligned columns, without trailing blanks.
func writeAligned(w io.Writer, rows [][]string) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, cells := range rows {
		// Every cell ends with a tab, even an empty last one: a column
		// is aligned only over lines that end its cell with a tab.
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	_ = tw.Flush()
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line != "" {
			fmt.Fprintln(w, strings.TrimRight(line, " \n"))
		}
	}
}

// volumeRows returns p's volumes sorted by name, or one "<none>" row.
func volumeRows(p status.Pod) []status.Volume {
	if len(p.Volumes) == 0 {
		return []status.Volume{{Name: "<none>"}}
	}
	vols := slices.Clone(p.Volumes)
	slices.SortStableFunc(vols, func(a, b status.Volume) int { return cmp.Compare(a.Name, b.Name) })
	return vols
}

func orDash(s string) string { return cmp.Or(s, "-") }

// cut puts s on one line and cuts it to width characters.
func cut(s string, width int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > width {
		return string(r[:width-3]) + "..."
	}
	return s
}

// age says how long ago since was, as kubectl does: 45s, 3m12s, 25m, 5h3m,
// 20h, 3d4h, 12d; "-" when since is unknown.
func age(now, since time.Time) string {
	if since.IsZero() {
		return "-"
	}
	d := max(now.Sub(since), 0)
	s, m, h := int(d.Seconds()), int(d.Minutes()), int(d.Hours())
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", s)
	case d < 10*time.Minute:
		return fmt.Sprintf("%dm%ds", m, s%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", m)
	case d < 8*time.Hour:
		return fmt.Sprintf("%dh%dm", h, m%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", h)
	case d < 8*24*time.Hour:
		return fmt.Sprintf("%dd%dh", h/24, h%24)
	default:
		return fmt.Sprintf("%dd", h/24)
	}
}
