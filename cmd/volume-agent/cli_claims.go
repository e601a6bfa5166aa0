package main

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/binder"
)

const claimsUsage = `Usage: volume-agent claims [--addr ADDR] [-o table|wide|json]

Shows the claims a running agent binds from its manifests, and the released
volumes on their way to deletion (from manifests or, in a cluster, those of
this agent's provisioners), read from its status endpoint (GET /v1/claims).
Nothing is changed.

-o table (the default) has one row per claim, sorted by claim:
  CLAIM         namespace/name
  PHASE         Pending, Bound, Lost or Released
  PV            the PersistentVolume it is bound to, or released
  CAPACITY      the PersistentVolume's capacity, while bound
  RECLAIM       what happens to the data once released: Delete or Retain
  DELETION      for released storage to be deleted: Released (in place,
                moved aside once no pod has it), Aside (restorable until
                DELETE-AFTER) or Deleting (being removed, never given back)
  DELETE-AFTER  when storage Aside is deleted, and in how long
  REASON        why it is not bound, or what it waits for; cut to 80
                characters (-o wide and -o json have it in full)
-o json prints the endpoint's answer as it is.

volume-agent claims delete-now NAMESPACE/NAME deletes the storage a
released claim left, now rather than at the end of --reclaim-delay (see
volume-agent claims delete-now --help).

Exit codes:
  0  the claims were shown
  2  bad arguments
  3  the agent could not be reached, or its answer was not understood

Flags:
`

func runClaims(env cmdEnv, args []string) int {
	if len(args) > 0 && args[0] == "delete-now" {
		return runDeleteNow(env, args[1:])
	}
	return listCommand[binder.ClaimStatus]{name: "claims", usage: claimsUsage, path: "/v1/claims", key: "claims",
		none: "No claims on this agent.", write: writeClaims}.run(env, args)
}

// writeClaims writes one row per claim, sorted by namespace and name (the
// endpoint's order within one name: a current claim before a released one).
func writeClaims(env cmdEnv, claims []binder.ClaimStatus, wide bool) {
	claims = slices.Clone(claims)
	slices.SortStableFunc(claims, func(a, b binder.ClaimStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	rows := [][]string{{"CLAIM", "PHASE", "PV", "CAPACITY", "RECLAIM", "DELETION", "DELETE-AFTER", "REASON"}}
	now := env.now()
	for _, c := range claims {
		step, after := "-", "-"
		if p := c.PendingDeletion; p != nil {
			step = p.Step
			if p.DeleteAfter != nil {
				after = p.DeleteAfter.UTC().Format(time.RFC3339) + " (in " + until(now, *p.DeleteAfter) + ")"
			}
		}
		reason := cut(c.Error, maxErrorWidth)
		if wide {
			reason = strings.Join(strings.Fields(c.Error), " ") // one line, whole
		}
		rows = append(rows, []string{c.Namespace + "/" + c.Name, string(c.Phase), orDash(c.PV), orDash(c.Capacity), orDash(c.ReclaimPolicy),
			step, after, reason})
	}
	writeAligned(env.stdout, rows)
}

// until says how long from now t is, as age says how long ago; "now" once
// it has passed.
func until(now, t time.Time) string {
	if !t.After(now) {
		return "now"
	}
	return age(t, now) // how long "ago" now is, seen from t
}
