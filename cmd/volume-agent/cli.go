package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/status"
)

// The operator subcommands — status, claims, wait, version, help — read a
// running agent's status endpoint (or the binary's build information, or
// print usage) and change nothing, but claims delete-now
// (cli_deletenow.go), which asks the agent to delete released storage. Without a subcommand the binary runs the
// agent.

// Exit codes of the subcommands; each one's --help lists those it uses.
const (
	exitOK          = 0
	exitNotReady    = 1 // wait: the time ran out before the pod was ready
	exitUsage       = 2 // bad arguments, as for the agent's flags
	exitUnreachable = 3 // the agent could not be reached, is stopping or gave an answer not understood
	exitUnknownPod  = 4 // wait: the agent does not know the pod
)

// defaultAddr is the agent's default --status-addr.
const defaultAddr = "127.0.0.1:9810"

// cmdEnv is where a subcommand writes and the clock it shows ages with;
// stdin is where a confirmation is read from, when isTTY says it is a
// terminal.
type cmdEnv struct {
	stdout, stderr io.Writer
	now            func() time.Time
	stdin          io.Reader
	isTTY          func() bool
}

func stdEnv() cmdEnv {
	return cmdEnv{stdout: os.Stdout, stderr: os.Stderr, now: time.Now, stdin: os.Stdin, isTTY: func() bool { return isTerminal(os.Stdin) }}
}

// terminal reports whether the standard input is a terminal an operator
// types at.
func (e cmdEnv) terminal() bool { return e.stdin != nil && e.isTTY != nil && e.isTTY() }

// subcommands are the names runSubcommand takes, for help and for the
// suggestion made for a mistyped one (a test holds the list to
// runSubcommand's cases).
var subcommands = []string{"status", "claims", "wait", "validate", "version", "help"}

// runSubcommand runs the subcommand args[0] names and returns its exit
// code; ok is false when args name no subcommand (the agent is to run). A
// first argument that is a word but no subcommand is a mistyped one (the
// agent takes flags only), except the hostPath checker's, which main runs.
func runSubcommand(args []string, env cmdEnv) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "help":
		return runHelp(env, args[1:]), true
	case "status":
		return runStatus(env, args[1:]), true
	case "wait":
		return runWait(env, args[1:]), true
	case "claims":
		return runClaims(env, args[1:]), true
	case "version":
		return runVersion(env, args[1:]), true
	case "validate":
		return runValidate(env, args[1:]), true
	}
	if commandWord.MatchString(args[0]) && args[0] != hostpath.CheckerArg && args[0] != hostpath.ServerArg {
		return failure(env, "", exitUsage, unknownCommand(args[0])), true
	}
	return 0, false
}

// newFlagSet returns the flag set of subcommand name, whose --help prints
// usage (which lists the exit codes and ends with a "Flags:" heading) and
// the flags, on stderr.
func newFlagSet(env cmdEnv, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("volume-agent "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() { writeUsage(fs, usage) }
	return fs
}

// writeUsage writes usage and the flags of fs to fs.Output(). The "Flags:"
// heading that ends usage is left out when fs has no flags.
func writeUsage(fs *flag.FlagSet, usage string) {
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if !hasFlags {
		usage = strings.TrimSuffix(strings.TrimSuffix(usage, "Flags:\n"), "\n")
	}
	fmt.Fprint(fs.Output(), usage)
	fs.PrintDefaults()
}

// parseQuietly parses args with fs and prints nothing: the flag package
// would print an error, then the whole usage, and the caller say the error
// again.
func parseQuietly(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()
	return flagError(fs, fs.Parse(args))
}

// The flag package's words for a flag it does not know and for a value
// that does not parse; it keeps only the text of the value's error
// ("parse error" for a duration), which says nothing of what to give.
var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	invalidValue  = regexp.MustCompile(`^invalid value ("(?:[^"\\]|\\.)*") for flag -([^:]+): `)
)

// flagError says err, an error of fs.Parse, in words that say what to do:
// the flags nearest to an unknown one, and what a duration looks like.
// Any other error is returned as it is.
func flagError(fs *flag.FlagSet, err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	if m := undefinedFlag.FindStringSubmatch(err.Error()); m != nil {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if near := closest(m[1], names); len(near) > 0 {
			return fmt.Errorf("%w; did you mean %s?", err, joinList(dashed(near), "or"))
		}
		return err
	}
	if m := invalidValue.FindStringSubmatch(err.Error()); m != nil {
		if want := wantedValue(fs.Lookup(m[2])); want != "" {
			return fmt.Errorf("--%s %s: want %s", m[2], m[1], want)
		}
	}
	return err
}

// wantedValue says what flag f takes, for a value that does not parse;
// "" when the flag package's own words are enough.
func wantedValue(f *flag.Flag) string {
	if f == nil {
		return ""
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration such as 10m or 30s (a number with a unit: ms, s, m or h)"
	case float64:
		return "a number, such as " + f.DefValue
	case int:
		return "a whole number, such as " + f.DefValue
	case bool:
		return "true or false"
	}
	return ""
}

// dashed returns names as flags: --name.
func dashed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "--" + n
	}
	return out
}

// parseArgs parses the flags wherever they stand among args (`wait UID
// --timeout 5s` as well as `wait --timeout 5s UID`) and returns the other
// arguments. The exit code is meaningful when done is true: --help was
// asked for (0, after printing the usage) or the arguments are bad (2,
// after saying why in one line).
func parseArgs(fs *flag.FlagSet, args []string) (rest []string, code int, done bool) {
	for {
		err := parseQuietly(fs, args)
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return nil, exitOK, true
		}
		if err != nil {
			fmt.Fprintf(fs.Output(), "%s: %v (see %s --help)\n", fs.Name(), err, fs.Name())
			return nil, exitUsage, true
		}
		if fs.NArg() == 0 {
			return rest, 0, false
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// usageError reports bad arguments of subcommand name.
func usageError(env cmdEnv, name string, err error) int {
	fmt.Fprintf(env.stderr, "volume-agent %s: %v (see volume-agent %s --help)\n", name, err, name)
	return exitUsage
}

// failure reports an error of subcommand name ("": of volume-agent
// itself) and returns code.
func failure(env cmdEnv, name string, code int, err error) int {
	fmt.Fprintf(env.stderr, "%s: %v\n", strings.TrimSpace("volume-agent "+name), err)
	return code
}

// maxAnswer bounds an answer read from the agent (the pods of a node
// take a few MB at most).
const maxAnswer = 256 << 20

// apiClient reads a running agent's status endpoint.
type apiClient struct {
	base string // "http://host:port"; "http://localhost" on a unix socket
	at   string // the endpoint, for messages: base, or unix:///path
	http *http.Client
}

// newAPIClient returns a client of the agent at addr: "host:port" or
// "unix:///path", as the agent's --status-addr, or an http:// URL.
func newAPIClient(addr string) (apiClient, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		a, err := status.ParseAddr(addr)
		if err != nil {
			return apiClient{}, fmt.Errorf("--addr %q: want host:port or unix:///path, as the agent's --status-addr", addr)
		}
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.Address)
		}
		return apiClient{base: "http://localhost", at: unixPrefix + path, http: &http.Client{Transport: &http.Transport{DialContext: dial}}}, nil
	}
	base := addr
	if !strings.Contains(addr, "://") {
		base = "http://" + addr
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return apiClient{}, fmt.Errorf("--addr %q: want host:port or unix:///path, as the agent's --status-addr", addr)
	}
	return apiClient{base: "http://" + u.Host, at: "http://" + u.Host, http: &http.Client{}}, nil
}

// unixPrefix starts an --addr that names a unix socket.
const unixPrefix = "unix://"

// get returns the status code and body of GET path, bounded by ctx.
func (c apiClient) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	resp, err := c.http.Do(req)
	switch {
	case errors.Is(err, syscall.EACCES):
		return 0, nil, fmt.Errorf("no permission to connect to the agent at %s: run as root, or as a member of the socket's group (the agent's --status-socket-group): %w", c.at, err)
	case err != nil:
		return 0, nil, fmt.Errorf("cannot reach the agent at %s (is it running, and is --addr its --status-addr?): %w", c.at, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, fmt.Errorf("read the answer to GET %s%s: %w", c.at, path, err)
	}
	return resp.StatusCode, body, nil
}

// unexpected is the error for an answer a subcommand does not understand.
func unexpected(method, path string, code int, body []byte) error {
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	return fmt.Errorf("unexpected answer to %s %s: %d %s: %s", method, path, code, http.StatusText(code), text)
}
