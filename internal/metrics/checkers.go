package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/volume-agent/volume-agent/internal/procpool"
)

var (
	checkersAbandonedDesc = prometheus.NewDesc("volume_agent_host_path_checkers_abandoned_total",
		"hostPath checker processes killed because a check passed its deadline (hung storage, most likely).", nil, nil)
	checkersUnreapedDesc = prometheus.NewDesc("volume_agent_host_path_checkers_unreaped",
		"hostPath checker processes killed but not ended yet: stuck in the kernel until their storage answers.", nil, nil)
)

// HostPathCheckers reports the hostPath checker pool's counts at every
// scrape.
func HostPathCheckers(stats func() procpool.Stats) Option {
	return func() prometheus.Collector { return checkersCollector(stats) }
}

type checkersCollector func() procpool.Stats

func (c checkersCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- checkersAbandonedDesc
	ch <- checkersUnreapedDesc
}

func (c checkersCollector) Collect(ch chan<- prometheus.Metric) {
	st := c()
	ch <- prometheus.MustNewConstMetric(checkersAbandonedDesc, prometheus.CounterValue, float64(st.Abandoned))
	ch <- prometheus.MustNewConstMetric(checkersUnreapedDesc, prometheus.GaugeValue, float64(st.Unreaped))
}
