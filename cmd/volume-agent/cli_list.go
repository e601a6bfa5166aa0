package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// listCommand is a subcommand that shows one list of the status endpoint,
// GET path, whose answer holds it under key: as a table, a wide table, or
// the answer as it is (-o json).
type listCommand[T any] struct {
	name, usage string
	path, key   string
	// none is said, on stderr, of an empty list.
	none  string
	write func(env cmdEnv, items []T, wide bool)
	// summary, when set, is a line printed above the table (not with
	// -o json).
	summary func(ctx context.Context, c apiClient, wide bool) string
	// more, when set, writes what else the answer (body) holds below the
	// table (not with -o json).
	more func(env cmdEnv, body []byte, wide bool) error
}

func (l listCommand[T]) run(env cmdEnv, args []string) int {
	fs := newFlagSet(env, l.name, l.usage)
	addr := fs.String("addr", defaultAddr, "the agent's status endpoint, as its --status-addr: host:port, or unix:///path for its socket")
	output := fs.String("o", "table", "output format: table, wide or json")
	rest, code, done := parseArgs(fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return usageError(env, l.name, fmt.Errorf("unexpected arguments: %s", strings.Join(rest, " ")))
	}
	if *output != "table" && *output != "wide" && *output != "json" {
		return usageError(env, l.name, fmt.Errorf("-o %q: want table, wide or json", *output))
	}
	c, err := newAPIClient(*addr)
	if err != nil {
		return usageError(env, l.name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	body, items, err := l.fetch(ctx, c)
	if err != nil {
		return failure(env, l.name, exitUnreachable, err)
	}
	if l.summary != nil && *output != "json" {
		fmt.Fprintln(env.stdout, l.summary(ctx, c, *output == "wide"))
	}
	switch {
	case *output == "json":
		_, _ = env.stdout.Write(body)
	case len(items) == 0:
		fmt.Fprintln(env.stderr, l.none)
	default:
		l.write(env, items, *output == "wide")
	}
	if l.more != nil && *output != "json" {
		if err := l.more(env, body, *output == "wide"); err != nil {
			return failure(env, l.name, exitUnreachable, err)
		}
	}
	return exitOK
}

// fetch returns the answer of GET path, as it is and decoded.
func (l listCommand[T]) fetch(ctx context.Context, c apiClient) ([]byte, []T, error) {
	code, body, err := c.get(ctx, l.path)
	if err != nil {
		return nil, nil, err
	}
	if code != http.StatusOK {
		return nil, nil, unexpected(http.MethodGet, l.path, code, body)
	}
	var answer map[string]json.RawMessage
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, nil, fmt.Errorf("decode the answer to GET %s: %w", l.path, err)
	}
	raw, ok := answer[l.key]
	if !ok || string(raw) == "null" {
		return nil, nil, fmt.Errorf("decode the answer to GET %s: no %q in it", l.path, l.key)
	}
	var items []T
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, fmt.Errorf("decode the answer to GET %s: %w", l.path, err)
	}
	return body, items, nil
}
