package state

import (
	"flag"
	"testing"

	"github.com/walq/walq/internal/testrule"
)

// TestMain holds every test of the package to the default run's time limit.
// The rapid state-machine tests check 15 random histories each in the
// default run and 300 in the long tests; -rapid.checks on the command line
// still says how many.
func TestMain(m *testing.M) {
	testrule.MainFunc(func() int {
		checks := "15"
		if testrule.Long {
			checks = "300"
		}
		if err := flag.Set("rapid.checks", checks); err != nil {
			panic(err)
		}
		return m.Run()
	})
}
