package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/status"
)

const waitUsage = `Usage: volume-agent wait UID [--addr ADDR] [--timeout 30s]

Waits until the volumes of pod UID are ready on a running agent: every
volume in the pod's spec is Mounted. It asks the status endpoint once and
is answered at the change (GET /v1/pods/UID?wait=...; a wait longer than
the endpoint's 5 minutes asks again). For container runtimes and scripts
that must not start a pod's containers before its volumes are there.
--timeout 0 looks once and does not wait. A pod the agent does not know
yet is waited for too: it may come with the next manifest or watch event.

Exit codes:
  0  the pod's volumes are ready
  1  --timeout passed first; the volumes that are not ready, and why, are
     printed
  2  bad arguments
  3  the agent could not be reached, is stopping (ask again once it is
     back), or gave an answer not understood
  4  the agent did not know the pod before --timeout passed

Flags:
`

// Errors of waitReady, for the exit code.
var (
	errNotReady   = errors.New("not ready")
	errUnknownPod = errors.New("unknown pod")
)

// answerSlack is how much longer than the wait asked for a request may
// take before the agent is deemed unreachable.
const answerSlack = 10 * time.Second

func runWait(env cmdEnv, args []string) int {
	fs := newFlagSet(env, "wait", waitUsage)
	addr := fs.String("addr", defaultAddr, "the agent's status endpoint, as its --status-addr")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the pod's volumes")
	rest, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(rest) != 1 || rest[0] == "" {
		return usageError(env, "wait", fmt.Errorf("want one pod UID, got %d arguments", len(rest)))
	}
	if *timeout < 0 {
		return usageError(env, "wait", fmt.Errorf("--timeout %v: want 0 or more", *timeout))
	}
	c, err := newAPIClient(*addr)
	if err != nil {
		return usageError(env, "wait", err)
	}
	p, err := waitReady(context.Background(), c, rest[0], *timeout, endpointPolls)
	switch {
	case err == nil:
		fmt.Fprintf(env.stdout, "pod %s/%s (%s): volumes ready\n", p.Namespace, p.Name, p.UID)
		return exitOK
	case errors.Is(err, errNotReady):
		fmt.Fprintf(env.stderr, "volume-agent wait: pod %s/%s (%s): volumes not ready after %v:\n", p.Namespace, p.Name, p.UID, *timeout)
		writeNotReady(env.stderr, p)
		return exitNotReady
	case errors.Is(err, errUnknownPod):
		return failure(env, "wait", exitUnknownPod, err)
	default:
		return failure(env, "wait", exitUnreachable, err)
	}
}

// pollLimits bound the requests of waitReady: each waits at most longest
// (the endpoint's MaxWait), and a new one starts at least shortest after
// the last, whatever the endpoint answers.
type pollLimits struct{ longest, shortest time.Duration }

var endpointPolls = pollLimits{longest: status.MaxWait, shortest: time.Second}

// waitReady waits up to timeout for pod uid to be ready and returns the pod
// as last answered. The error wraps errNotReady or errUnknownPod when the
// agent said so.
func waitReady(ctx context.Context, c apiClient, uid string, timeout time.Duration, limits pollLimits) (status.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := max(time.Until(deadline).Round(time.Millisecond), 0)
		wait := min(left, limits.longest)
		asked := time.Now()
		p, err := askPod(ctx, c, uid, wait)
		if err != nil || p.Ready {
			return p, err
		}
		if wait == left { // it had all the time there was
			return p, errNotReady
		}
		// The wait was cut to the endpoint's longest: ask again.
		time.Sleep(min(time.Until(asked.Add(limits.shortest)), time.Until(deadline)))
	}
}

// askPod asks for pod uid, answered once it is ready or wait has passed
// (at once when wait is 0). A pod that is not ready comes without error.
func askPod(ctx context.Context, c apiClient, uid string, wait time.Duration) (status.Pod, error) {
	path := "/v1/pods/" + url.PathEscape(uid)
	if wait > 0 {
		path += "?wait=" + wait.String()
	}
	ctx, cancel := context.WithTimeout(ctx, wait+answerSlack)
	defer cancel()
	code, body, err := c.get(ctx, path)
	if err != nil {
		return status.Pod{}, err
	}
	switch code {
	case http.StatusOK, http.StatusGatewayTimeout:
		var p status.Pod
		if err := json.Unmarshal(body, &p); err != nil || p.UID == "" {
			return status.Pod{}, unexpected(path, code, body)
		}
		return p, nil
	case http.StatusNotFound:
		return status.Pod{}, fmt.Errorf("%w: the agent at %s does not know pod %s (is it on this node, and its UID, not its name? volume-agent status -o wide shows UIDs)", errUnknownPod, c.base, uid)
	case http.StatusServiceUnavailable:
		return status.Pod{}, fmt.Errorf("the agent at %s is stopping: %s", c.base, strings.TrimSpace(string(body)))
	default:
		return status.Pod{}, unexpected(path, code, body)
	}
}

// writeNotReady lists the volumes of p that keep it from being ready.
func writeNotReady(w io.Writer, p status.Pod) {
	for _, v := range p.Volumes {
		if v.State == status.Mounted {
			continue
		}
		line := fmt.Sprintf("  %s: %s", v.Name, v.State)
		if v.Error != "" {
			line += ": " + v.Error
		}
		fmt.Fprintln(w, line)
	}
}
