package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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
  SOURCE        what its volume is made from: VolumeSnapshot/NAME (a
                restore) or PersistentVolumeClaim/NAME (a clone); - for
                an empty volume
  RECLAIM       what happens to the data once released: Delete or Retain
  DELETION      for released storage to be deleted: Released (in place,
                moved aside once no pod has it), Aside (restorable until
                DELETE-AFTER) or Deleting (being removed, never given back)
  DELETE-AFTER  when storage Aside is deleted, and in how long
  REASON        why it is not bound, or what it waits for; cut to 80
                characters (-o wide and -o json have it in full)
Below, when the manifests define VolumeSnapshots, one row per snapshot:
  SNAPSHOT      namespace/name of the VolumeSnapshot
  CLAIM         the claim it is (to be) taken of
  READY         true once a claim can be made from it
  RESTORE-SIZE  the least size of a claim made from it
  AGE           how long ago it was taken
  DELETION      for a VolumeSnapshot removed from the manifests: when its
                snapshot is deleted, or Deleting
  REASON        what it waits for, or why it is refused; cut to 80
                characters
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
		none: "No claims on this agent.", write: writeClaims, more: writeSnapshots}.run(env, args)
}

// writeClaims writes one row per claim, sorted by namespace and name (the
// endpoint's order within one name: a current claim before a released one).
func writeClaims(env cmdEnv, claims []binder.ClaimStatus, wide bool) {
	claims = slices.Clone(claims)
	slices.SortStableFunc(claims, func(a, b binder.ClaimStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	rows := [][]string{{"CLAIM", "PHASE", "PV", "CAPACITY", "SOURCE", "RECLAIM", "DELETION", "DELETE-AFTER", "REASON"}}
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
		rows = append(rows, []string{c.Namespace + "/" + c.Name, string(c.Phase), orDash(c.PV), orDash(c.Capacity),
			orDash(strings.Replace(c.DataSource, " ", "/", 1)), orDash(c.ReclaimPolicy), step, after, reason})
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

// writeSnapshots writes, below the claims, one row per VolumeSnapshot of
// the answer (body), in its order; nothing when it has none.
func writeSnapshots(env cmdEnv, body []byte, wide bool) error {
	var answer struct {
		Snapshots []binder.SnapshotStatus `json:"snapshots"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("decode the answer to GET /v1/claims: %w", err)
	}
	if len(answer.Snapshots) == 0 {
		return nil
	}
	now := env.now()
	rows := [][]string{{"SNAPSHOT", "CLAIM", "READY", "RESTORE-SIZE", "AGE", "DELETION", "REASON"}}
	for _, s := range answer.Snapshots {
		created, deletion := "-", "-"
		if s.CreationTime != nil {
			created = age(now, *s.CreationTime)
		}
		switch {
		case s.Deleting:
			deletion = "Deleting"
		case s.DeleteAfter != nil:
			deletion = s.DeleteAfter.UTC().Format(time.RFC3339) + " (in " + until(now, *s.DeleteAfter) + ")"
		case s.Removed:
			deletion = "removal not counted yet"
		}
		reason := cut(s.Error, maxErrorWidth)
		if wide {
			reason = strings.Join(strings.Fields(s.Error), " ")
		}
		rows = append(rows, []string{s.Namespace + "/" + s.Name, s.Claim, strconv.FormatBool(s.ReadyToUse), orDash(s.RestoreSize),
			created, deletion, reason})
	}
	fmt.Fprintln(env.stdout)
	writeAligned(env.stdout, rows)
	return nil
}
