package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/volume-agent/volume-agent/internal/status"
)

var waitUsage = strings.Replace(`Usage: volume-agent wait POD [--addr ADDR] [--timeout 30s]

Waits until the volumes of a pod are ready on a running agent: every
volume in the pod's spec is Mounted. For container runtimes and scripts
that must not start a pod's containers before its volumes are there.

POD is the pod's UID, or its namespace/name (volume-agent status -o wide
shows both). A namespace/name is looked up in the agent's list of pods
(GET /v1/pods), then waited for by the UID found. It names one pod at a
time, as in Kubernetes; should the agent list two pods by that name (the
same pod in a manifest and in the API server), wait names their UIDs and
exits 2: give the UID.

It asks the status endpoint once and is answered at the change (GET
/v1/pods/UID?wait=...; a wait longer than the endpoint's 5 minutes asks
again; an agent with MAXWAITING requests waiting already refuses to wait, and is
then asked without waiting, a second apart). --timeout 0 looks once and does not wait. A pod the agent does not
know yet is waited for too: it may come with the next manifest or watch
event (a namespace/name is looked up again, at most a second apart).

Exit codes:
  0  the pod's volumes are ready
  1  --timeout passed first; the volumes that are not ready, and why, are
     printed
  2  bad arguments, or a namespace/name the agent lists more than one pod
     by
  3  the agent could not be reached, is stopping (ask again once it is
     back), or gave an answer not understood
  4  the agent did not know the pod before --timeout passed

Flags:
`, "MAXWAITING", strconv.Itoa(status.DefaultMaxWaiting), 1)

// Errors of waitPod, for the exit code.
var (
	errNotReady   = errors.New("not ready")
	errUnknownPod = errors.New("unknown pod")
	errAmbiguous  = errors.New("more than one pod by that name")
	// errBusy: the agent refused to wait, having too many requests
	// waiting already; askPod's caller looks without waiting instead.
	errBusy = errors.New("too many requests waiting on the agent")
)

// answerSlack is how much longer than the wait asked for a request may
// take before the agent is deemed unreachable.
const answerSlack = 10 * time.Second

func runWait(env cmdEnv, args []string) int {
	fs := newFlagSet(env, "wait", waitUsage)
	addr := fs.String("addr", defaultAddr, "the agent's status endpoint, as its --status-addr: host:port, or unix:///path for its socket")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the pod's volumes")
	rest, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(rest) != 1 {
		return usageError(env, "wait", fmt.Errorf("want one pod, its UID or namespace/name; got %d arguments", len(rest)))
	}
	pod, err := parsePodRef(rest[0])
	if err != nil {
		return usageError(env, "wait", err)
	}
	if *timeout < 0 {
		return usageError(env, "wait", fmt.Errorf("--timeout %v: want 0 or more", *timeout))
	}
	c, err := newAPIClient(*addr)
	if err != nil {
		return usageError(env, "wait", err)
	}
	p, err := waitPod(context.Background(), c, pod, *timeout, endpointPolls)
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
	case errors.Is(err, errAmbiguous):
		return failure(env, "wait", exitUsage, err)
	default:
		return failure(env, "wait", exitUnreachable, err)
	}
}

// pollLimits bound the requests of waitPod: each waits at most longest
// (the endpoint's MaxWait), and a new one starts at least shortest after
// the last, whatever the endpoint answers. A namespace/name not listed yet
// is looked up again after lookup, doubled each time up to shortest.
type pollLimits struct{ longest, shortest, lookup time.Duration }

var endpointPolls = pollLimits{longest: status.MaxWait, shortest: time.Second, lookup: 100 * time.Millisecond}

// podRef is the pod to wait for: by UID, or by namespace and name.
type podRef struct{ uid, namespace, name string }

// parsePodRef reads a UID, or a namespace/name: the agent's UIDs hold no
// "/" (a manifest's must be a directory name, the API server's are UUIDs).
func parsePodRef(arg string) (podRef, error) {
	ns, name, byName := strings.Cut(arg, "/")
	switch {
	case !byName && arg != "":
		return podRef{uid: arg}, nil
	case byName && len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0:
		return podRef{namespace: ns, name: name}, nil
	}
	return podRef{}, fmt.Errorf("pod %q: want its UID, or its namespace/name as Kubernetes spells them (lower-case letters, digits, '-' and '.')", arg)
}

func (r podRef) String() string {
	if r.uid != "" {
		return r.uid
	}
	return r.namespace + "/" + r.name
}

// waitPod waits up to timeout for the pod ref names to be ready, after
// looking a namespace/name up, and returns the pod as last answered.
func waitPod(ctx context.Context, c apiClient, ref podRef, timeout time.Duration, limits pollLimits) (status.Pod, error) {
	deadline := time.Now().Add(timeout)
	uid := ref.uid
	if uid == "" {
		var err error
		if uid, err = lookupUID(ctx, c, ref, deadline, limits); err != nil {
			return status.Pod{}, err
		}
	}
	return waitReady(ctx, c, uid, max(time.Until(deadline), 0), limits)
}

// lookupUID returns the UID of the pod namespace/name, listed by the agent
// before deadline. The endpoint cannot wait for a name, so a pod not listed
// yet is looked up again, less often as time goes by: a runtime asks right
// after it wrote the manifest, the agent lists the pod a moment later.
func lookupUID(ctx context.Context, c apiClient, ref podRef, deadline time.Time, limits pollLimits) (string, error) {
	pause := limits.lookup
	for {
		uids, err := podUIDs(ctx, c, ref)
		switch {
		case err != nil:
			return "", err
		case len(uids) == 1:
			return uids[0], nil
		case len(uids) > 1:
			return "", fmt.Errorf("%w: the agent at %s lists %d pods %s, with UIDs %s; give the UID of the one to wait for",
				errAmbiguous, c.at, len(uids), ref, strings.Join(uids, ", "))
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", fmt.Errorf("%w: the agent at %s does not know pod %s (is it on this node, in that namespace? volume-agent status lists the pods it knows)", errUnknownPod, c.at, ref)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, limits.shortest)
	}
}

// podUIDs returns the UIDs of the pods the agent lists as namespace/name.
func podUIDs(ctx context.Context, c apiClient, ref podRef) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, answerSlack)
	defer cancel()
	_, pods, err := listCommand[status.Pod]{path: "/v1/pods", key: "pods"}.fetch(ctx, c)
	if err != nil {
		return nil, err
	}
	var uids []string
	for _, p := range pods {
		if p.Namespace == ref.namespace && p.Name == ref.name {
			uids = append(uids, p.UID)
		}
	}
	slices.Sort(uids)
	return uids, nil
}

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
		busy := errors.Is(err, errBusy)
		if busy {
			// Too many requests wait on the agent: look without waiting,
			// and ask again a moment later.
			p, err = askPod(ctx, c, uid, 0)
		}
		if err != nil || p.Ready {
			return p, err
		}
		if (wait == left && !busy) || time.Until(deadline) <= 0 { // it had all the time there was
			return p, errNotReady
		}
		// The wait was cut to the endpoint's longest, or refused: ask again.
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
			return status.Pod{}, unexpected(http.MethodGet, path, code, body)
		}
		return p, nil
	case http.StatusNotFound:
		return status.Pod{}, fmt.Errorf("%w: the agent at %s does not know pod %s (is it on this node, and its UID? give the UID or namespace/name, as volume-agent status -o wide shows them)", errUnknownPod, c.at, uid)
	case http.StatusTooManyRequests:
		return status.Pod{}, errBusy
	case http.StatusServiceUnavailable:
		return status.Pod{}, fmt.Errorf("the agent at %s is stopping: %s", c.at, strings.TrimSpace(string(body)))
	default:
		return status.Pod{}, unexpected(http.MethodGet, path, code, body)
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
