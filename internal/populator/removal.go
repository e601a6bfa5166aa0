package populator

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/evidence"
	"github.com/volume-agent/volume-agent/internal/source"
)

// PodDirs lists the pod directories on disk (the actual state's).
type PodDirs interface {
	// PodDirsWhere returns the pod directories for whose UID keep returns
	// true.
	PodDirsWhere(keep func(types.UID) bool) []asw.PodDir
}

// decideRemovals decides, for every pod directory on disk whose pod is not
// desired and not known to be removed, whether its removal counts, by the
// evidence of the source its record names (package evidence): a pod its
// source listed since start and then dropped was removed by DeletePod; this
// decides for the pods found on disk at start that no source listed since.
// It returns when a decision changes by the passing of time alone (zero:
// never).
func (p *Populator) decideRemovals(statuses []source.Status, now time.Time) time.Time {
	if p.cfg.PodDirs == nil {
		return time.Time{}
	}
	undecided := p.cfg.PodDirs.PodDirsWhere(func(uid types.UID) bool { return p.cache[uid] == nil })
	var due time.Time
	for _, d := range undecided {
		if p.cfg.Desired.Removed(d.UID) {
			continue
		}
		v := verdict(d, statuses, now, p.cfg.Settle)
		if v.Removed {
			p.cfg.Desired.MarkRemoved(d.UID)
			p.log.Info("pod found on disk is gone from its source; its volumes are torn down", foundFields(d)...)
			continue
		}
		if why, ok := p.cfg.Desired.Held(d.UID); !ok || why != v.Why {
			p.log.Info("pod found on disk is kept: its removal does not count yet", append(foundFields(d), zap.String("why", v.Why))...)
		}
		p.cfg.Desired.Hold(d.UID, v.Why)
		if !v.Due.IsZero() && (due.IsZero() || v.Due.Before(due)) {
			due = v.Due
		}
	}
	return due
}

// verdict decides on the removal of d's pod from the evidence of its
// source, or of every source when its record is missing.
func verdict(d asw.PodDir, statuses []source.Status, now time.Time, hold time.Duration) evidence.Verdict {
	if d.Source == "" {
		v := evidence.Verdict{Removed: true}
		for _, st := range statuses {
			if one := evidence.Removed(listing(st), evidence.Absence{}, now, hold); !one.Removed {
				v = one
				v.Why = "its directory has no record of its source, so every source must say it is gone; " + v.Why
				break
			}
		}
		return v
	}
	for _, st := range statuses {
		if st.Name == d.Source {
			return evidence.Removed(listing(st), evidence.Absence{}, now, hold)
		}
	}
	return evidence.Verdict{Why: fmt.Sprintf("its record says it came from source %q, which this agent does not run", d.Source)}
}

func listing(st source.Status) evidence.Listing {
	return evidence.Listing{Source: st.Name, Synced: st.Synced, Authoritative: st.Authoritative, Since: st.ListingSince}
}

func foundFields(d asw.PodDir) []zap.Field {
	fields := []zap.Field{zap.String("podUID", string(d.UID))}
	if d.Name != "" {
		fields = append(fields, zap.String("pod", d.Namespace+"/"+d.Name), zap.String("source", d.Source))
	}
	return fields
}
