package usage

import "context"

// measureOnce measures t on s in a pass of its own: what the measurement
// returned, or why its call was abandoned.
func measureOnce(u *Usage, s *slot, t Target) (m Measurement, ok bool, err error) {
	u.runPass(context.Background(), []job{{s: s,
		run: func(w *worker) {
			mm, okk, e := u.measureTarget(w, s, t)
			if !w.isAbandoned() {
				m, ok, err = mm, okk, e
			}
		},
		abandoned: func(e error) { err = e },
	}})
	return m, ok, err
}
