package browsertest

import (
	"flag"
	"testing"

	"github.com/walq/walq/internal/testrule"
)

// afterTests run once every test has, in the process that ran them (the
// browser tests close their browser).
var afterTests []func()

// TestMain holds every test of the package to the default run's time limit
// (the browser tests are built with the tag long, which lifts it).
func TestMain(m *testing.M) {
	testrule.MainFunc(func() int {
		flag.Parse()
		code := m.Run()
		for _, f := range afterTests {
			f()
		}
		return code
	})
}
