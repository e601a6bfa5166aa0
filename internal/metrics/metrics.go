// Package metrics defines the agent's Prometheus metrics: operations by
// plugin, operation and outcome with their durations, volumes by state,
// and, when given the inputs, whether each source is synced, how long
// volumes have been Uncertain, and how many pods are Terminating or stuck
// in their teardown. It registers on a registry it is given; it
// owns no global state. METRICS.md documents every metric, and
// internal/docs checks it against the registry.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics records operation outcomes.
type Metrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// Option adds a group of metrics computed at scrape time from an input
// of the agent.
type Option func() prometheus.Collector

// New registers the metrics on reg. volumesByState, and the inputs of the
// options, are read at every scrape.
func New(reg prometheus.Registerer, volumesByState func() map[string]int, opts ...Option) *Metrics {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "volume_agent_operations_total",
			Help: "Volume operations by plugin, operation (setup, refresh, teardown, cleanup) and outcome (success, error, timeout).",
		}, []string{"plugin", "operation", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "volume_agent_operation_duration_seconds",
			Help:    "Duration of volume operations by plugin and operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"plugin", "operation"}),
	}
	reg.MustRegister(m.ops, m.duration, &volumeCollector{byState: volumesByState})
	for _, opt := range opts {
		reg.MustRegister(opt())
	}
	return m
}

// ObserveOperation records one operation.
func (m *Metrics) ObserveOperation(plugin, operation, outcome string, d time.Duration) {
	m.ops.WithLabelValues(plugin, operation, outcome).Inc()
	m.duration.WithLabelValues(plugin, operation).Observe(d.Seconds())
}

var volumesDesc = prometheus.NewDesc("volume_agent_volumes",
	"Volumes of pods on this node by state (Pending, Mounted, Failed, Unsupported, Terminating).",
	[]string{"state"}, nil)

// volumeCollector reports volume counts computed at scrape time.
type volumeCollector struct {
	byState func() map[string]int
}

func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- volumesDesc }

func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	for state, n := range c.byState() {
		ch <- prometheus.MustNewConstMetric(volumesDesc, prometheus.GaugeValue, float64(n), state)
	}
}
