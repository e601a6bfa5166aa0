// Package suggest finds the name a user most likely meant when the one
// given names nothing: a misspelt field of a manifest, a StorageClass
// that does not exist. It only compares strings; it never decides that a
// name was meant, so callers say "did you mean", never act on the answer.
package suggest

import "strings"

// Nearest returns the name of names that word is most likely a
// misspelling of: one equal to it but for case, else one at most two
// edits away (one for words of four bytes or fewer, where two edits make
// another word). Of several as near, the first in byte order is given,
// so the answer does not depend on the order of names. It returns ""
// when none is close.
func Nearest(word string, names []string) string {
	maxDist := 2
	if len(word) <= 4 {
		maxDist = 1
	}
	best, bestDist := "", maxDist+1
	for _, name := range names {
		if strings.EqualFold(name, word) {
			return name
		}
		if d := Distance(word, name); d < bestDist || (d == bestDist && name < best) {
			best, bestDist = name, d
		}
	}
	return best
}

// Distance is the optimal string alignment distance of a and b, in
// bytes: the fewest insertions, deletions, substitutions and swaps of two
// neighbours (the commonest typo, "stauts") that turn a into b.
func Distance(a, b string) int {
	// prev2, prev and cur are the rows i-2, i-1 and i of the table whose
	// cell j is the distance of a[:i] and b[:j].
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
