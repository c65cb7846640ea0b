package crashtest

import (
	"os"
	"testing"

	"github.com/walq/walq/internal/testrule"
)

// The test binary is also the child: the harness starts it again with the
// child's configuration in the environment.
func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain())
	}
	testrule.Main(m)
}
