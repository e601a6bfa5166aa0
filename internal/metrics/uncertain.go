package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

var (
	uncertainDesc = prometheus.NewDesc("volume_agent_uncertain_volumes",
		"Set-up volumes whose state is Uncertain: found on disk after a restart, cut short by a timeout, or found dead by a check; the agent sets them up again.",
		nil, nil)
	uncertainAgeDesc = prometheus.NewDesc("volume_agent_uncertain_longest_seconds",
		"How long the volume Uncertain the longest has been so, counted from the first scrape that saw it Uncertain; 0 when none is.",
		nil, nil)
)

// ActualVolumes is the actual state the Uncertain metrics are read from.
type ActualVolumes interface {
	Volumes() []asw.Volume
}

// Uncertain reports how many set-up volumes are Uncertain and how long the
// oldest of them has been so.
func Uncertain(actual ActualVolumes) Option {
	return func() prometheus.Collector { return newUncertainCollector(actual, time.Now) }
}

// uncertainCollector remembers, across scrapes, since when each volume has
// been seen Uncertain: the actual state records no times. A volume that
// leaves the state and comes back between two scrapes counts as never
// having left it.
type uncertainCollector struct {
	actual ActualVolumes
	now    func() time.Time

	mu    sync.Mutex
	since map[dsw.Key]time.Time // guarded by mu
}

func newUncertainCollector(actual ActualVolumes, now func() time.Time) *uncertainCollector {
	return &uncertainCollector{actual: actual, now: now, since: map[dsw.Key]time.Time{}}
}

func (c *uncertainCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- uncertainDesc
	ch <- uncertainAgeDesc
}

func (c *uncertainCollector) Collect(ch chan<- prometheus.Metric) {
	n, longest := c.observe()
	ch <- prometheus.MustNewConstMetric(uncertainDesc, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(uncertainAgeDesc, prometheus.GaugeValue, longest.Seconds())
}

// observe updates since from the actual state and returns the number of
// Uncertain volumes and the longest time one has been so.
func (c *uncertainCollector) observe() (int, time.Duration) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[dsw.Key]time.Time, len(c.since))
	var longest time.Duration
	for _, v := range c.actual.Volumes() {
		if v.State != asw.Uncertain {
			continue
		}
		since, ok := c.since[v.Key()]
		if !ok {
			since = now
		}
		seen[v.Key()] = since
		longest = max(longest, now.Sub(since))
	}
	c.since = seen
	return len(seen), longest
}
