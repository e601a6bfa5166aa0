package main

import (
	"maps"
	"testing"
	"time"
)

// TestParseRequests sums apiserver_request_total by verb and resource
// (with the subresource), over codes and scopes, reads the requests open
// (watches, counted only when they end), and ignores the rest.
func TestParseRequests(t *testing.T) {
	body := []byte(`# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 440
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 110
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="serviceaccounts",scope="resource",subresource="token",verb="POST",version="v1"} 5
apiserver_request_duration_seconds_count{component="apiserver",resource="events",verb="POST"} 442
apiserver_longrunning_requests{component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="WATCH",version="v1"} 221
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="WATCH",version="v1"} 0
`)
	got := parseRequests(body)
	want := map[string]float64{"POST events": 442, "LIST configmaps": 110, "POST serviceaccounts/token": 5, "open: WATCH configmaps": 221, "open: WATCH pods": 0}
	if !maps.Equal(got, want) {
		t.Errorf("parseRequests = %v, want %v", got, want)
	}
	before := map[string]float64{"POST events": 400, "LIST configmaps": 110, "open: WATCH configmaps": 100}
	base := map[string]float64{"open: WATCH configmaps": 1, "open: WATCH pods": 1}
	d := requestsBetween(before, got, base)
	if !maps.Equal(d, map[string]float64{"POST events": 42, "POST serviceaccounts/token": 5, "open: WATCH configmaps": 220, "open: WATCH pods": -1}) {
		t.Errorf("requestsBetween = %v", d)
	}
	if s := requestsString(d); s != "47 served: POST events 42, POST serviceaccounts/token 5; open at the end, against before the burst: WATCH configmaps +220, WATCH pods -1" {
		t.Errorf("requestsString = %q", s)
	}
}

// TestDecay turns readings a second apart into CPU and wake-ups each
// second, and from the second interval on.
func TestDecay(t *testing.T) {
	var readings []usage
	for i, cpu := range []time.Duration{0, 100, 120, 121, 122, 123} { // ms so far
		readings = append(readings, usage{onCPU: cpu * time.Millisecond, switches: int64(i * i * 10)})
	}
	d := decay(readings, time.Second)
	if want := []float64{100, 20, 1, 1, 1}; !equalFloats(d.Millicores, want) {
		t.Errorf("millicores %v, want %v", d.Millicores, want)
	}
	if want := []float64{10, 30, 50, 70, 90}; !equalFloats(d.WakeupsPerSec, want) {
		t.Errorf("wake-ups %v, want %v", d.WakeupsPerSec, want)
	}
	// From reading 2 (120 ms, 40 switches) to 5 (123 ms, 250): 3 s.
	if d.SettledMillicores != 1 || d.SettledWakeupsPerSec != 70 {
		t.Errorf("settled %v millicores, %v wake-ups/s; want 1, 70", d.SettledMillicores, d.SettledWakeupsPerSec)
	}
}

// TestCPUBetween prefers the threads' nanoseconds, unless the clock ticks
// say more than their rounding: a thread ended and took its time along.
func TestCPUBetween(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		ticks, precise, want time.Duration
	}{
		{10 * ms, 13 * ms, 13 * ms},
		{30 * ms, 13 * ms, 13 * ms}, // within 2 ticks
		{50 * ms, 13 * ms, 50 * ms},
	} {
		if got := cpuBetween(usage{}, usage{cpu: tc.ticks, onCPU: tc.precise}); got != tc.want {
			t.Errorf("ticks %v, threads %v: %v, want %v", tc.ticks, tc.precise, got, tc.want)
		}
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := a[i] - b[i]; d > 1e-9 || d < -1e-9 {
			return false
		}
	}
	return true
}
