package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/volume-agent/volume-agent/internal/procpool"
)

var (
	checkersAbandonedDesc = prometheus.NewDesc("volume_agent_host_path_checkers_abandoned_total",
		"Checker processes (hostPath checks, subPath opens) killed because a request passed its deadline (hung storage, most likely).", nil, nil)
	checkersUnreapedDesc = prometheus.NewDesc("volume_agent_host_path_checkers_unreaped",
		"Checker processes killed but not ended yet: stuck in the kernel until their storage answers.", nil, nil)
	checkersUnreapedMaxDesc = prometheus.NewDesc("volume_agent_host_path_checkers_unreaped_max",
		"The most killed checker processes that may be stuck before checks and subPath opens are refused.", nil, nil)
	checkersRefusedDesc = prometheus.NewDesc("volume_agent_host_path_checkers_refused_total",
		"Checks and subPath opens refused because the most killed checker processes that may be stuck were stuck.", nil, nil)
)

// HostPathCheckers reports the checker pool's counts at every scrape: the
// processes that check host paths and open subPaths.
func HostPathCheckers(stats func() procpool.Stats) Option {
	return func() prometheus.Collector { return checkersCollector(stats) }
}

type checkersCollector func() procpool.Stats

func (c checkersCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- checkersAbandonedDesc
	ch <- checkersUnreapedDesc
	ch <- checkersUnreapedMaxDesc
	ch <- checkersRefusedDesc
}

func (c checkersCollector) Collect(ch chan<- prometheus.Metric) {
	st := c()
	ch <- prometheus.MustNewConstMetric(checkersAbandonedDesc, prometheus.CounterValue, float64(st.Abandoned))
	ch <- prometheus.MustNewConstMetric(checkersUnreapedDesc, prometheus.GaugeValue, float64(st.Unreaped))
	ch <- prometheus.MustNewConstMetric(checkersUnreapedMaxDesc, prometheus.GaugeValue, float64(st.MaxStuck))
	ch <- prometheus.MustNewConstMetric(checkersRefusedDesc, prometheus.CounterValue, float64(st.Refused))
}
