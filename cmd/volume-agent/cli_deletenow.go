package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/status"
)

const deleteNowUsage = `Usage: volume-agent claims delete-now NAMESPACE/NAME [--confirm NAMESPACE/NAME] [--pv PV] [--addr ADDR] [--root-dir DIR] [--timeout 2m]

Deletes, now, the storage a released claim left, instead of when its
--reclaim-delay ends (manifest mode; in a cluster, set the PersistentVolume's
annotation volume-agent.io/delete-after instead). It cannot be undone.

Only storage that is released and set aside, waiting for its deletion
(volume-agent claims shows it Released, DELETION Aside), is deleted; for
anything else it says what state the claim is in and what to do, and
changes nothing. The storage is named by its PersistentVolume and the UID of
the claim that released it, as the agent shows them: a claim of the same
name made since is never touched. The deletion is the one the end of the
delay would make: a class with archiveOnDelete "true" archives the storage
instead (the confirmation says which). It is recorded in the agent's
claims.json before it begins, so an agent killed meanwhile finishes it after
a restart, and logged with who asked.

It asks for the claim's NAMESPACE/NAME to be typed again, on a terminal. A
script, whose standard input is not a terminal, must give --confirm with the
same NAMESPACE/NAME instead; without it delete-now refuses. Run it as root:
the agent takes only requests that carry the token in its
--root-dir/operator-token.

Exit codes:
  0  the storage is deleted (or archived)
  1  the deletion is recorded and under way, but not finished within
     --timeout (see volume-agent claims; it finishes after any restart)
  2  bad arguments, or not confirmed: nothing was done
  3  the agent could not be reached, or its answer was not understood
  4  the agent has no released claim of that name (or PV)
  5  refused: the claim's storage is not released and aside

Flags:
`

// exitRefused: delete-now refused, for the state the storage is in.
const exitRefused = 5

// deleteNowPoll is how often delete-now looks whether the storage is gone.
const deleteNowPoll = 200 * time.Millisecond

func runDeleteNow(env cmdEnv, args []string) int {
	const name = "claims delete-now"
	fs := newFlagSet(env, name, deleteNowUsage)
	addr := fs.String("addr", defaultAddr, "the agent's status endpoint, as its --status-addr: host:port, or unix:///path for its socket")
	rootDir := fs.String("root-dir", "/var/lib/volume-agent", "the agent's --root-dir, which holds the token delete-now must show")
	confirm := fs.String("confirm", "", "NAMESPACE/NAME of the claim again, for scripts: the confirmation a terminal would ask for")
	pv := fs.String("pv", "", "the PersistentVolume, when the agent holds released storage of more than one claim of that name")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the deletion to finish; 0 returns once it is recorded")
	rest, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(rest) != 1 || strings.Count(rest[0], "/") != 1 || strings.HasPrefix(rest[0], "/") || strings.HasSuffix(rest[0], "/") {
		return usageError(env, name, errors.New("want one claim, as NAMESPACE/NAME"))
	}
	claim := rest[0]
	if *timeout < 0 {
		return usageError(env, name, fmt.Errorf("--timeout %v: want 0 or more", *timeout))
	}
	if *confirm != "" && *confirm != claim {
		return usageError(env, name, fmt.Errorf("--confirm %s is not the claim named, %s: nothing was done", *confirm, claim))
	}
	if *confirm == "" && !env.terminal() {
		return usageError(env, name, fmt.Errorf("standard input is not a terminal, so the claim's name cannot be typed again: give --confirm %s to delete its storage from a script", claim))
	}
	c, err := newAPIClient(*addr)
	if err != nil {
		return usageError(env, name, err)
	}
	token, err := readOperatorToken(*rootDir)
	if err != nil {
		return failure(env, name, exitUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	target, code, err := releasedStorage(ctx, c, claim, *pv)
	if err != nil {
		return failure(env, name, code, err)
	}
	what := "deleted"
	if target.PendingDeletion.Archive {
		what = "archived (its class has archiveOnDelete \"true\": the storage is kept, renamed archived-…, not removed)"
	}
	fmt.Fprintf(env.stderr, "The storage of PersistentVolume %s, released by claim %s (UID %s), is aside until %s.\n"+
		"It will be %s now, and cannot be given back to the claim after that.\n",
		target.PV, claim, orDash(string(target.UID)), target.PendingDeletion.DeleteAfter.UTC().Format(time.RFC3339), what)
	if *confirm == "" {
		fmt.Fprintf(env.stderr, "Type the claim's NAMESPACE/NAME again to go on: ")
		line, _ := bufio.NewReader(io.LimitReader(env.stdin, 1024)).ReadString('\n')
		if strings.TrimSpace(line) != claim {
			fmt.Fprintf(env.stderr, "volume-agent %s: %q is not %s: not confirmed, nothing was done\n", name, strings.TrimSpace(line), claim)
			return exitUsage
		}
	}
	req := binder.DeleteNowRequest{Namespace: target.Namespace, Name: target.Name, UID: target.UID, PV: target.PV}
	if code, err := c.postDeleteNow(ctx, token, req); err != nil {
		return failure(env, name, code, err)
	}
	if *timeout == 0 {
		fmt.Fprintf(env.stdout, "storage of PersistentVolume %s: deletion recorded and under way\n", target.PV)
		return exitOK
	}
	if err := waitGone(c, target, *timeout); err != nil {
		return failure(env, name, exitNotReady, err)
	}
	if target.PendingDeletion.Archive {
		fmt.Fprintf(env.stdout, "storage of PersistentVolume %s (claim %s) archived\n", target.PV, claim)
	} else {
		fmt.Fprintf(env.stdout, "storage of PersistentVolume %s (claim %s) deleted\n", target.PV, claim)
	}
	return exitOK
}

// releasedStorage finds, in GET /v1/claims, the storage aside that claim
// (NAMESPACE/NAME) released, the one on PV pv if given; otherwise it says
// what state the claim is in and what to do, with the exit code.
func releasedStorage(ctx context.Context, c apiClient, claim, pv string) (binder.ClaimStatus, int, error) {
	all, err := fetchClaims(ctx, c)
	if err != nil {
		return binder.ClaimStatus{}, exitUnreachable, err
	}
	var named, aside []binder.ClaimStatus
	for _, cs := range all {
		if cs.Namespace+"/"+cs.Name != claim || (pv != "" && cs.PV != pv) {
			continue
		}
		named = append(named, cs)
		if p := cs.PendingDeletion; cs.Phase == binder.PhaseReleased && p != nil && p.Step == "Aside" && p.DeleteAfter != nil {
			aside = append(aside, cs)
		}
	}
	switch {
	case len(aside) == 1:
		return aside[0], 0, nil
	case len(aside) > 1:
		var pvs []string
		for _, cs := range aside {
			pvs = append(pvs, fmt.Sprintf("%s (claim UID %s)", cs.PV, orDash(string(cs.UID))))
		}
		return binder.ClaimStatus{}, exitUsage, fmt.Errorf("claim %s released storage more than once, on %s: give --pv", claim, joinList(pvs, "and"))
	case len(named) == 0 && pv != "":
		return binder.ClaimStatus{}, exitUnknownPod, fmt.Errorf("the agent has no claim %s on PersistentVolume %s (see volume-agent claims)", claim, pv)
	case len(named) == 0:
		return binder.ClaimStatus{}, exitUnknownPod, fmt.Errorf("the agent has no claim %s (see volume-agent claims)", claim)
	}
	var states []string
	for _, cs := range named {
		states = append(states, notAside(cs))
	}
	return binder.ClaimStatus{}, exitRefused, fmt.Errorf("refused: only storage released and set aside (volume-agent claims: Released, DELETION Aside) can be deleted now, and %s; nothing was done",
		strings.Join(states, "; "))
}

// notAside says what state cs is in, and what to do before delete-now.
func notAside(cs binder.ClaimStatus) string {
	c := "claim " + cs.Namespace + "/" + cs.Name
	p := cs.PendingDeletion
	switch {
	case cs.Phase == binder.PhaseBound || cs.Phase == binder.PhaseLost:
		return fmt.Sprintf("%s is %s to PersistentVolume %s: remove the claim from the manifests (and the pods that use it) first, then ask once its storage is aside", c, cs.Phase, orDash(cs.PV))
	case cs.Phase == binder.PhasePending:
		return fmt.Sprintf("%s is Pending: it has no storage to delete", c)
	case cs.Phase == binder.PhaseReleased && p == nil:
		return fmt.Sprintf("%s released PersistentVolume %s, whose reclaim policy is %s: the agent never deletes its data; remove it by hand if it is not wanted", c, cs.PV, orDash(cs.ReclaimPolicy))
	case p == nil:
		return fmt.Sprintf("%s is %s", c, cs.Phase)
	case p.Step == "Released":
		return fmt.Sprintf("the storage %s released (PersistentVolume %s) is still in place, most often because a pod on this node still has it set up: stop that pod, and ask once volume-agent claims shows DELETION Aside", c, cs.PV)
	case p.Step == "Deleting":
		return fmt.Sprintf("the storage %s released (PersistentVolume %s) is being deleted already: nothing to do but wait", c, cs.PV)
	}
	return fmt.Sprintf("%s is %s, its storage %s", c, cs.Phase, p.Step)
}

// fetchClaims returns the claims of GET /v1/claims.
func fetchClaims(ctx context.Context, c apiClient) ([]binder.ClaimStatus, error) {
	_, items, err := listCommand[binder.ClaimStatus]{path: "/v1/claims", key: "claims"}.fetch(ctx, c)
	return items, err
}

// waitGone waits until the storage of target is no longer listed: the
// binder drops a record once its storage is deleted or archived.
func waitGone(c apiClient, target binder.ClaimStatus, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
		all, err := fetchClaims(ctx, c)
		cancel()
		gone := err == nil
		for _, cs := range all {
			gone = gone && !(cs.PV == target.PV && cs.Phase == binder.PhaseReleased)
		}
		if gone {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the deletion of the storage of PersistentVolume %s is recorded and under way, but not finished after %v "+
				"(see volume-agent claims, and the agent's log for \"storage operation failed\"); it is finished after any restart", target.PV, timeout)
		}
		time.Sleep(deleteNowPoll)
	}
}

// postDeleteNow asks the agent to delete req's storage now; the exit code
// goes with the error.
func (c apiClient) postDeleteNow(ctx context.Context, token string, req binder.DeleteNowRequest) (int, error) {
	const path = "/v1/claims/delete-now"
	body, err := json.Marshal(req)
	if err != nil {
		return exitUsage, err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return exitUsage, err
	}
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(status.OperatorHeader, operator())
	resp, err := c.http.Do(r)
	if err != nil {
		return exitUnreachable, fmt.Errorf("cannot reach the agent at %s: %w", c.at, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	text := strings.TrimSpace(string(answer))
	switch resp.StatusCode {
	case http.StatusOK:
		return exitOK, nil
	case http.StatusNotFound:
		if text == http.StatusText(http.StatusNotFound) || text == "404 page not found" {
			// No such route (the mux's own answer), not "no such storage".
			return exitUnreachable, errNoDeleteNow
		}
		return exitUnknownPod, errors.New(text)
	case http.StatusConflict:
		return exitRefused, errors.New(text)
	case http.StatusUnauthorized:
		return exitUsage, fmt.Errorf("the agent refused the token (is --root-dir the agent's, the one serving --addr?): %s", text)
	case http.StatusMethodNotAllowed:
		return exitUnreachable, errNoDeleteNow
	}
	return exitUnreachable, unexpected(http.MethodPost, path, resp.StatusCode, answer)
}

// errNoDeleteNow: the agent has no delete-now route (it answers 404 or 405).
var errNoDeleteNow = errors.New("the agent serves no delete-now: it runs without --manifests, or is an older version")

// operator says who runs the command, for the agent's log.
func operator() string {
	who := fmt.Sprintf("uid=%d pid=%d", os.Getuid(), os.Getpid())
	if u, err := user.Current(); err == nil {
		who = "user=" + u.Username + " " + who
	}
	if sudo := os.Getenv("SUDO_USER"); sudo != "" {
		who += " sudo_user=" + sudo
	}
	return who
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS) //nolint:gosec // G115: a descriptor fits an int
	return err == nil
}
