package metrics

import (
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather returns every sample of the registry as "name{label=value,...} value",
// histograms as their sample count.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			name := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	states := map[string]int{"Pending": 2, "Mounted": 3, "Failed": 0, "Unsupported": 1}
	reg := prometheus.NewRegistry()
	m := New(reg, func() map[string]int { return states })

	if got := gather(t, reg); !reflect.DeepEqual(got, map[string]float64{
		"volume_agent_volumes{state=Pending}":     2,
		"volume_agent_volumes{state=Mounted}":     3,
		"volume_agent_volumes{state=Failed}":      0,
		"volume_agent_volumes{state=Unsupported}": 1,
	}) {
		t.Fatalf("before any operation: %v", got)
	}

	m.ObserveOperation("kubernetes.io/configmap", "setup", "success", 2*time.Millisecond)
	m.ObserveOperation("kubernetes.io/configmap", "setup", "success", 3*time.Millisecond)
	m.ObserveOperation("kubernetes.io/configmap", "refresh", "error", time.Millisecond)
	m.ObserveOperation("kubernetes.io/empty-dir", "teardown", "timeout", time.Minute)
	states["Mounted"] = 4 // computed at every scrape

	want := map[string]float64{
		"volume_agent_operations_total{operation=setup,outcome=success,plugin=kubernetes.io/configmap}":    2,
		"volume_agent_operations_total{operation=refresh,outcome=error,plugin=kubernetes.io/configmap}":    1,
		"volume_agent_operations_total{operation=teardown,outcome=timeout,plugin=kubernetes.io/empty-dir}": 1,
		"volume_agent_operation_duration_seconds{operation=setup,plugin=kubernetes.io/configmap}":          2,
		"volume_agent_operation_duration_seconds{operation=refresh,plugin=kubernetes.io/configmap}":        1,
		"volume_agent_operation_duration_seconds{operation=teardown,plugin=kubernetes.io/empty-dir}":       1,
		"volume_agent_volumes{state=Pending}":     2,
		"volume_agent_volumes{state=Mounted}":     4,
		"volume_agent_volumes{state=Failed}":      0,
		"volume_agent_volumes{state=Unsupported}": 1,
	}
	if got := gather(t, reg); !reflect.DeepEqual(got, want) {
		t.Fatalf("gathered %v\nwant %v", got, want)
	}
}

func TestDurationIsInSeconds(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, func() map[string]int { return nil })
	m.ObserveOperation("p", "setup", "success", 1500*time.Millisecond)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "volume_agent_operation_duration_seconds" {
			if sum := f.GetMetric()[0].GetHistogram().GetSampleSum(); sum != 1.5 {
				t.Fatalf("duration sum = %v, want 1.5 (seconds)", sum)
			}
			return
		}
	}
	t.Fatal("no duration histogram")
}

// New holds no global state: two sets of metrics live on two registries,
// and registering twice on one registry is refused.
func TestFreshRegistries(t *testing.T) {
	a, b := prometheus.NewRegistry(), prometheus.NewRegistry()
	ma := New(a, func() map[string]int { return nil })
	New(b, func() map[string]int { return nil })
	ma.ObserveOperation("p", "setup", "success", time.Millisecond)
	if got := gather(t, b); len(got) != 0 {
		t.Fatalf("an operation on one registry's metrics shows on the other: %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering twice on one registry did not panic")
		}
	}()
	New(a, func() map[string]int { return nil })
}

func TestMetricsLint(t *testing.T) {
	// The collector must describe what it collects, or a pedantic registry
	// (and promlint-style checks) reject it at scrape time.
	reg := prometheus.NewPedanticRegistry()
	New(reg, func() map[string]int { return map[string]int{"Mounted": 1} })
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("pedantic gather: %v", err)
	}
}
