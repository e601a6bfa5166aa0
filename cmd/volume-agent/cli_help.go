package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

const helpUsage = `Usage: volume-agent help [COMMAND]

Prints how to run the agent and its flags, or the usage of COMMAND, on
stdout. volume-agent --help and volume-agent COMMAND --help print the same
on stderr.

Exit codes:
  0  the usage was printed
  2  bad arguments, or no such command

Flags:
`

// runHelp prints the agent's usage, or that of the subcommand args name.
func runHelp(env cmdEnv, args []string) int {
	fs := newFlagSet(env, "help", helpUsage)
	rest, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	switch {
	case len(rest) == 0:
		writeAgentUsage(env.stdout)
		return exitOK
	case len(rest) > 1:
		return usageError(env, "help", fmt.Errorf("want at most one command, got %d arguments", len(rest)))
	case !slices.Contains(subcommands, rest[0]):
		return failure(env, "help", exitUsage, unknownCommand(rest[0]))
	}
	// The command's --help, on stdout: help was asked for.
	code, _ = runSubcommand([]string{rest[0], "--help"}, cmdEnv{stdout: env.stdout, stderr: env.stdout, now: env.now})
	return code
}

// commandWord is what a first argument meant as a subcommand looks like:
// a word, not a flag or a path (the agent takes no arguments, so such a
// first argument can only be a mistyped subcommand).
var commandWord = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// unknownCommand is the error for word, which names no subcommand; it
// suggests the subcommands closest to it.
func unknownCommand(word string) error {
	if near := closest(word, subcommands); len(near) > 0 {
		return fmt.Errorf("unknown command %q; did you mean %s?", word, joinList(near, "or"))
	}
	return fmt.Errorf("unknown command %q: the commands are %s; the agent itself takes flags only (see volume-agent help)", word, joinList(subcommands, "and"))
}

// maxTypos is how many edits away from a command a word may be for the
// command to be suggested: one or two typos.
const maxTypos = 2

// closest returns the names within maxTypos edits of word (case ignored),
// or that start with it, the nearest first: only those at the smallest
// distance.
func closest(word string, names []string) []string {
	word = strings.ToLower(word)
	best, out := maxTypos+1, []string(nil)
	for _, name := range names {
		d := editDistance(word, name)
		if strings.HasPrefix(name, word) {
			d = min(d, 1) // a command cut short is as near as one typo
		}
		switch {
		case d < best:
			best, out = d, []string{name}
		case d == best:
			out = append(out, name)
		}
	}
	return out
}

// editDistance is the optimal string alignment distance of a and b: the
// fewest insertions, deletions, substitutions and swaps of two neighbours
// (the commonest typo, "stauts") that turn a into b.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	// d[i][j] is the distance of x[:i] and y[:j].
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// joinList joins names as "a", "a or b", "a, b or c" (conj "or").
func joinList(names []string, conj string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}
