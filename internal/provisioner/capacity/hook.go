package capacity

// stepHook, set by the crash tests only, is called at each point where a
// crash can cut a step short: before and after each tool and each write
// of a record. The tests kill the process there.
var stepHook func()

func crashPoint() {
	if stepHook != nil {
		stepHook()
	}
}
