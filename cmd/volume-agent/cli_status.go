package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/status"
)

const statusUsage = `Usage: volume-agent status [--addr ADDR] [-o table|wide|json]

Shows the pods a running agent serves and the state of each of their
volumes, read from its status endpoint (GET /v1/pods). Nothing is changed.

A first line says whether the agent is ready (GET /readyz) and, when not,
why, with the errors of its sources (GET /v1/sources: a manifest file that
does not parse, naming the file and why); cut to 200 characters (-o wide
has it in full).

-o table (the default) has one row per volume, sorted by pod then volume:
  POD     namespace/name
  VOLUME  the volume's name in the pod's spec (<none> for a pod without volumes)
  PLUGIN  the plugin serving it (- when none does)
  STATE   Pending, Mounted, Failed or Unsupported
  AGE     how long it has been in that state
  USED    the bytes it uses, in binary units (Ki, Mi, Gi...; - until measured)
  SIZE    the capacity of its file system (- until measured)
  ERROR   why it is not Mounted, or why its last refresh failed, or why
          it is kept as it is (a claim deleted while the pod runs), or
          the warning of a disk emptyDir over its sizeLimit; cut to 80
          characters
A reason longer than 80 characters is also shown whole under its row,
wrapped at 100 columns and indented: an error says last what caused it
and what to do. At most 8 lines: a longer one keeps its first line and
its end. -o wide has every reason whole on its row, -o json as it is.
-o wide adds the pod's UID (for volume-agent wait) and the volume's path on
the host, and never cuts an error. -o json prints the endpoint's answer as
it is.

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

// A reason the table cuts is shown whole under its row, in at most
// maxReasonLines lines of reasonWidth characters (reasonLines).
const (
	reasonWidth    = 100
	maxReasonLines = 8
	reasonIndent   = "    "
)

func runStatus(env cmdEnv, args []string) int {
	return listCommand[status.Pod]{name: "status", usage: statusUsage, path: "/v1/pods", key: "pods",
		none: "No pods on this agent.", write: writeTable, summary: readiness}.run(env, args)
}

// maxSummaryWidth is where the readiness line is cut.
const maxSummaryWidth = 200

// readiness is the line above the status table: "Ready: yes" or "Ready: no:
// <why>" from GET /readyz, and the sources' errors from GET /v1/sources.
func readiness(ctx context.Context, c apiClient, wide bool) string {
	line := "Ready: yes"
	switch code, body, err := c.get(ctx, "/readyz"); {
	case err != nil:
		line = "Ready: unknown: " + err.Error()
	case code == http.StatusServiceUnavailable:
		line = "Ready: no: " + strings.TrimSpace(string(body))
	case code != http.StatusOK:
		line = "Ready: unknown: " + unexpected(http.MethodGet, "/readyz", code, body).Error()
	}
	if errs := sourceErrors(ctx, c); len(errs) > 0 {
		line += "; source errors: " + strings.Join(errs, "; ")
	}
	if wide {
		return strings.Join(strings.Fields(line), " ")
	}
	return cut(line, maxSummaryWidth)
}

// sourceErrors lists the errors of every source as "source: error", or
// none when GET /v1/sources cannot be read.
func sourceErrors(ctx context.Context, c apiClient) []string {
	code, body, err := c.get(ctx, "/v1/sources")
	if err != nil || code != http.StatusOK {
		return nil
	}
	var answer struct{ Sources []source.Status }
	if json.Unmarshal(body, &answer) != nil {
		return nil
	}
	var out []string
	for _, s := range answer.Sources {
		for _, e := range s.Errors {
			out = append(out, s.Name+": "+e)
		}
	}
	return out
}

// writeTable writes one row per volume (per pod without volumes), sorted
// by namespace, name and UID, then volume.
func writeTable(env cmdEnv, pods []status.Pod, wide bool) {
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b status.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
	})
	rows := [][]string{{"POD", "VOLUME", "PLUGIN", "STATE", "AGE", "USED", "SIZE", "ERROR"}}
	if wide {
		rows[0] = []string{"POD", "UID", "VOLUME", "PLUGIN", "STATE", "AGE", "USED", "SIZE", "PATH", "ERROR"}
	}
	now := env.now()
	under := [][]string{nil} // the lines under each row: none under the header
	for _, p := range pods {
		for _, v := range volumeRows(p) {
			text := cmp.Or(v.Error, v.Warning)
			if p.State == status.Held {
				text = cmp.Or(text, p.Reason) // why it is kept as it is
			}
			msg, lines := cut(text, maxErrorWidth), reasonLines(text)
			if wide {
				msg, lines = strings.Join(strings.Fields(text), " "), nil // one line, whole
			}
			used, size := usedAndSize(v.Usage)
			row := []string{p.Namespace + "/" + p.Name, v.Name, orDash(v.Plugin), orDash(v.State), age(now, v.Since), used, size, msg}
			if wide {
				row = slices.Insert(row, 1, p.UID)
				row = slices.Insert(row, 8, orDash(v.Path))
			}
			rows, under = append(rows, row), append(under, lines)
		}
	}
	for i, line := range aligned(rows) {
		fmt.Fprintln(env.stdout, line)
		for _, l := range under[i] {
			fmt.Fprintln(env.stdout, l)
		}
	}
}

// writeAligned writes rows in aligned columns, without trailing blanks.
func writeAligned(w io.Writer, rows [][]string) {
	for _, line := range aligned(rows) {
		fmt.Fprintln(w, line)
	}
}

// aligned returns rows as lines of aligned columns, without trailing
// blanks: one line per row.
func aligned(rows [][]string) []string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, cells := range rows {
		// Every cell ends with a tab, even an empty last one: a column
		// is aligned only over lines that end its cell with a tab.
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	_ = tw.Flush()
	var out []string
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line != "" {
			out = append(out, strings.TrimRight(line, " \n"))
		}
	}
	return out
}

// reasonLines shows a reason the table cuts (longer than maxErrorWidth)
// whole under its row: wrapped at reasonWidth, indented. Errors wrap
// their causes from the outside in, so the end of a long one says what
// caused it and what to do: one that takes more than maxReasonLines
// lines keeps its first line (what failed) and its end. nil for a reason
// the cell holds whole.
func reasonLines(text string) []string {
	words := strings.Fields(text)
	if len([]rune(strings.Join(words, " "))) <= maxErrorWidth {
		return nil
	}
	lines := wrap(words, reasonWidth)
	if len(lines) > maxReasonLines {
		lines = slices.Concat(lines[:1], []string{"..."}, lines[len(lines)-(maxReasonLines-2):])
	}
	for i := range lines {
		lines[i] = reasonIndent + lines[i]
	}
	return lines
}

// wrap puts words on lines of at most width characters; a longer word is
// split.
func wrap(words []string, width int) []string {
	var lines []string
	var line []rune
	for _, w := range words {
		r := []rune(w)
		if len(line) > 0 && len(line)+1+len(r) > width {
			lines, line = append(lines, string(line)), nil
		}
		if len(line) > 0 {
			line = append(line, ' ')
		}
		line = append(line, r...)
		for len(line) > width {
			lines, line = append(lines, string(line[:width])), line[width:]
		}
	}
	if len(line) > 0 {
		lines = append(lines, string(line))
	}
	return lines
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

// usedAndSize returns the USED and SIZE cells of a volume's usage.
func usedAndSize(u *status.Usage) (string, string) {
	if u == nil {
		return "-", "-"
	}
	return bytesIEC(u.UsedBytes), bytesIEC(u.CapacityBytes)
}

// bytesIEC writes n in binary units as kubectl writes quantities: 512B,
// 1.5Ki, 20Mi, 120Gi (one decimal below 10).
func bytesIEC(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	v := float64(n)
	unit := ""
	for _, u := range []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	if v < 10 && v != float64(int(v)) {
		return fmt.Sprintf("%.1f%s", v, unit)
	}
	return fmt.Sprintf("%.0f%s", v, unit)
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
