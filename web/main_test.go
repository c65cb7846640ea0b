package web

import (
	"flag"
	"testing"

	"github.com/walq/walq/internal/testrule"
)

// TestMain holds every test of the package to the default run's time limit.
func TestMain(m *testing.M) {
	testrule.MainFunc(func() int {
		flag.Parse()
		return m.Run()
	})
}
