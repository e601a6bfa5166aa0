package evidence

import (
	"fmt"
	"time"
)

// Settle is how long the absence of an object from the manifest directory
// must hold before it counts: a file written in place can be read
// half-written, and a deploy tool's `rm f; cp new f` is over well within
// it.
const Settle = 750 * time.Millisecond

// Listing is what a source's list says about the objects it does not
// hold, at one moment.
type Listing struct {
	// Source names the source in reasons ("manifests", "api").
	Source string
	// Synced: the source has delivered its complete state since start.
	Synced bool
	// Authoritative: once synced, an object the source does not list is
	// gone (the API server, whose objects are deleted, not lost).
	Authoritative bool
	// Since is when the source last began to list at least one object,
	// without a pause since; zero while it lists none.
	Since time.Time
}

// Absence is what was seen of one object the source does not list now.
type Absence struct {
	// Seen: the source listed the object since the agent started, so its
	// removal was observed while the agent ran.
	Seen bool
	// Since is when the object was first missing after it was seen
	// (meaningful with Seen).
	Since time.Time
}

// Verdict is whether a removal counts, and if not, why and until when.
type Verdict struct {
	Removed bool
	// Why says why the removal does not count yet; "" when it counts.
	Why string
	// Due is when the verdict changes by the passing of time alone; zero
	// when it does not.
	Due time.Time
}

// Removed decides whether an object that l's source does not list is
// removed, at now, once the absence has held for hold:
//   - never while the source is not synced: not known yet;
//   - at once for an authoritative source;
//   - an object seen since start: once it has been missing for hold;
//   - an object absent at start: once the source has listed objects,
//     without a pause, for hold. A source that lists nothing is no
//     evidence: a disk not mounted yet, a sync not done.
func Removed(l Listing, a Absence, now time.Time, hold time.Duration) Verdict {
	switch {
	case !l.Synced:
		return Verdict{Why: fmt.Sprintf("its source, %s, is not synced: not known yet", l.Source)}
	case l.Authoritative:
		return Verdict{Removed: true}
	case a.Seen:
		return held(a.Since, now, hold, "removed")
	case l.Since.IsZero():
		return Verdict{Why: fmt.Sprintf("absent since start, and its source, %s, has listed nothing since: "+
			"a source that lists nothing removes nothing", l.Source)}
	}
	return held(l.Since, now, hold, fmt.Sprintf("absent since start, while its source, %s, has listed objects", l.Source))
}

// held is the verdict on an absence that began at since. Its reason names
// the time, not the time elapsed, so that it stays the same from one
// moment to the next.
func held(since, now time.Time, hold time.Duration, what string) Verdict {
	if now.Sub(since) < hold {
		return Verdict{Why: fmt.Sprintf("%s since %s: it counts once that has held for %v", what, since.UTC().Format("15:04:05.000"), hold),
			Due: since.Add(hold)}
	}
	return Verdict{Removed: true}
}
