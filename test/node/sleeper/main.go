// Command sleeper is the process of the test node's tiny images: the pause
// (sandbox) image and the workload image. It sleeps until SIGTERM or SIGINT
// and then exits 0, so that a pod stops at once instead of waiting out its
// grace period. It is built static (CGO_ENABLED=0) and is the only file of
// those images.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
