package binder

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: Run
// must join the inner source and the binding loop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
