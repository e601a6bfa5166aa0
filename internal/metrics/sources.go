package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/volume-agent/volume-agent/internal/source"
)

var (
	sourceSyncedDesc = prometheus.NewDesc("volume_agent_source_synced",
		"1 once the source has delivered its complete state since start, else 0; until every source is synced, nothing found on disk at start is torn down.",
		[]string{"source"}, nil)
	sourceDisconnectedDesc = prometheus.NewDesc("volume_agent_source_disconnected",
		"1 while the source cannot see changes (the API server does not answer) and serves its last state, else 0.",
		[]string{"source"}, nil)
)

// Sources reports, for each source, whether it is synced and whether it is
// disconnected, from its Status at every scrape.
func Sources(srcs []source.Source) Option {
	return func() prometheus.Collector { return sourceCollector(srcs) }
}

type sourceCollector []source.Source

func (c sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sourceSyncedDesc
	ch <- sourceDisconnectedDesc
}

func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, src := range c {
		st := src.Status()
		ch <- prometheus.MustNewConstMetric(sourceSyncedDesc, prometheus.GaugeValue, bit(st.Synced), src.Name())
		ch <- prometheus.MustNewConstMetric(sourceDisconnectedDesc, prometheus.GaugeValue, bit(st.Disconnected != ""), src.Name())
	}
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
