package metrics

import "github.com/prometheus/client_golang/prometheus"

var (
	terminatingDesc = prometheus.NewDesc("volume_agent_terminating_pods",
		"Pods gone from the sources whose volumes or directory are still on the node (Terminating in /v1/pods).",
		nil, nil)
	stuckDesc = prometheus.NewDesc("volume_agent_stuck_teardowns",
		"Terminating pods whose last teardown of a volume, or removal of their directory, failed; /v1/pods gives the reason.",
		nil, nil)
)

// TerminatingCounter counts the Terminating pods, and those of them whose
// teardown failed.
type TerminatingCounter interface {
	TerminatingPods() (terminating, stuck int)
}

// Terminating reports how many pods are Terminating and how many of them
// are stuck, from c at every scrape.
func Terminating(c TerminatingCounter) Option {
	return func() prometheus.Collector { return terminatingCollector{c} }
}

type terminatingCollector struct{ counter TerminatingCounter }

func (c terminatingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- terminatingDesc
	ch <- stuckDesc
}

func (c terminatingCollector) Collect(ch chan<- prometheus.Metric) {
	n, stuck := c.counter.TerminatingPods()
	ch <- prometheus.MustNewConstMetric(terminatingDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(stuckDesc, prometheus.GaugeValue, float64(stuck))
}
