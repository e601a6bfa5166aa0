package manifest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: Run must
// join everything it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
