package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// requestCounter is a cluster that can tell how many requests its API
// server has served so far (cluster mode).
type requestCounter interface {
	// requests returns apiserver_request_total summed by verb and
	// resource ("POST events", "GET pods/status"), and the requests open
	// (apiserver_longrunning_requests: "open: WATCH configmaps"), or an
	// error.
	requests() (map[string]float64, error)
}

var _ requestCounter = (*apiServer)(nil)

// requests reads the API server's own /metrics. Every client's requests
// count: the agent's and the benchmark's (its creates and deletes of pods
// and objects).
func (a *apiServer) requests() (map[string]float64, error) {
	body, err := a.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return nil, fmt.Errorf("API server metrics: %w", err)
	}
	return parseRequests(body), nil
}

// openPrefix marks the requests still open (watches) among the counts:
// a request is counted in apiserver_request_total when it ends.
const openPrefix = "open: "

// parseRequests sums the apiserver_request_total samples of a Prometheus
// text exposition by verb and resource (with its subresource, if any), and
// the apiserver_longrunning_requests ones by the same, marked openPrefix.
func parseRequests(body []byte) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line, prefix := sc.Text(), ""
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			prefix = openPrefix
			rest, ok = strings.CutPrefix(line, "apiserver_longrunning_requests{")
		}
		if !ok {
			continue
		}
		labelText, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		labels := parseLabels(labelText)
		resource := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			resource += "/" + sub
		}
		out[prefix+labels["verb"]+" "+resource] += v
	}
	return out
}

// parseLabels reads `a="x",b="y"` (values without escaped quotes, as the
// API server's request labels are).
func parseLabels(s string) map[string]string {
	labels := map[string]string{}
	for s != "" {
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		value, rest, _ := strings.Cut(rest, `"`)
		labels[name] = value
		s = strings.TrimPrefix(rest, ",")
	}
	return labels
}

// requestsBetween is what was served between two readings, without the
// kinds served none, and how many more (or fewer) requests are open at
// the second than at base, a reading before the burst: the watches the
// burst made the agent open, without the API server's own.
func requestsBetween(before, after, base map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if strings.HasPrefix(k, openPrefix) {
			if d := v - base[k]; d != 0 {
				out[k] = d
			}
		} else if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// requestsString lists requests by kind, most first.
func requestsString(reqs map[string]float64) string {
	kinds := slices.Collect(maps.Keys(reqs))
	slices.SortFunc(kinds, func(a, b string) int {
		return cmp.Or(cmp.Compare(reqs[b], reqs[a]), cmp.Compare(a, b))
	})
	var total float64
	var served, open []string
	for _, k := range kinds {
		if strings.HasPrefix(k, openPrefix) {
			open = append(open, fmt.Sprintf("%s %+.0f", strings.TrimPrefix(k, openPrefix), reqs[k]))
			continue
		}
		served = append(served, fmt.Sprintf("%s %.0f", k, reqs[k]))
		total += reqs[k]
	}
	s := fmt.Sprintf("%.0f served: %s", total, strings.Join(served, ", "))
	if len(open) > 0 {
		s += "; open at the end, against before the burst: " + strings.Join(open, ", ")
	}
	return s
}
