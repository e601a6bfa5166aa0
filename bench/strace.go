package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Reading strace -f output: which call, how it ended, and what its
// arguments look like with the particulars left out.

// stracePrefix is the thread ID strace -f writes before each line.
var stracePrefix = regexp.MustCompile(`^\d+ +`)

// straceResult is the end of a finished call: ") = ret [ERRNO (text)]",
// possibly followed by strace's comment in parentheses.
var straceResult = regexp.MustCompile(`\) += (-?\d+|\?|0x[0-9a-f]+)(?: (E[A-Z0-9]+) \([^)]*\))?(?: \(.*\))?$`)

// straceCall is the name at the start of a call or of its resumption.
var straceCall = regexp.MustCompile(`^(?:<\.\.\. )?([a-z_0-9]+)(?:\(| resumed>)`)

// parseStrace counts the calls of an strace -f output: a call split by
// another thread's ("<unfinished ...>", then "<... name resumed>") counts
// once, when it returns; calls never finished (at detach) not at all.
// shape makes a failing call's arguments generic.
func parseStrace(rd io.Reader, shape func(string) string) (syscallStep, error) {
	st := syscallStep{Calls: map[string]int{}, Failing: map[string]int{}, Shapes: map[string]int{}}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	begun := map[string]string{} // thread → the arguments of its unfinished call
	for sc.Scan() {
		line := sc.Text()
		tid := strings.TrimSpace(stracePrefix.FindString(line))
		line = line[len(stracePrefix.FindString(line)):]
		if strings.HasPrefix(line, "--- SIG") {
			st.Signals++
			continue
		}
		m := straceCall.FindStringSubmatch(line)
		if m == nil {
			continue // "+++ exited", strace's own messages
		}
		name := cmp.Or(unnamedCalls[m[1]], m[1])
		if before, ok := strings.CutSuffix(line, "<unfinished ...>"); ok {
			begun[tid] = strings.TrimRight(before, " ")
			continue
		}
		if strings.HasPrefix(line, "<... ") {
			_, rest, _ := strings.Cut(line, " resumed>")
			line = joinResumed(begun[tid], rest)
			delete(begun, tid)
		}
		res := straceResult.FindStringSubmatch(line)
		if res == nil {
			continue // detached in the call
		}
		st.Calls[name]++
		if errno := res[2]; errno != "" {
			st.Failing[name+" "+errno]++
			if !runtimeCalls[name] && errno != "EAGAIN" {
				st.Shapes[fmt.Sprintf("%s %s", errno, shape(line[:len(line)-len(res[0])+1]))]++
			}
		}
	}
	return st, sc.Err()
}

// joinResumed joins the two halves of a call strace wrote apart.
func joinResumed(begun, rest string) string {
	if strings.HasSuffix(begun, "(") || strings.HasPrefix(rest, ")") {
		return begun + rest
	}
	return begun + " " + rest
}

var (
	shapeTimestamp = regexp.MustCompile(`\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+`)
	shapePod       = regexp.MustCompile(`\b(pod|configmap|secret)-p\d+-\d+`)
	shapeUID       = regexp.MustCompile(`/p\d+-\d+\b`)
	shapeHex       = regexp.MustCompile(`0x[0-9a-f]+`)
	shapeNumber    = regexp.MustCompile(`\b\d+\b`)
)

// shaper returns the function that makes a call's arguments generic: the
// agent's root and manifest directory by name, pods, timestamps and
// numbers replaced.
func shaper(root, manifests string) func(string) string {
	return func(call string) string {
		if root != "" {
			call = strings.ReplaceAll(call, root, "<root>")
		}
		if manifests != "" {
			call = strings.ReplaceAll(call, manifests, "<manifests>")
		}
		call = shapeTimestamp.ReplaceAllString(call, "..<ts>")
		call = shapePod.ReplaceAllString(call, "$1-<n>")
		call = shapeUID.ReplaceAllString(call, "/<uid>")
		call = shapeHex.ReplaceAllString(call, "0x…")
		call = shapeNumber.ReplaceAllString(call, "N")
		if len(call) > 140 {
			call = call[:140] + "…"
		}
		return call
	}
}
