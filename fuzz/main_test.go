package fuzz

import (
	"os"
	"testing"

	"github.com/walq/walq/internal/testrule"
)

// TestMain holds every test of the package to the default run's time
// limit. Its scratch directories go to /dev/shm when it exists and TMPDIR
// is not set, as in fuzz/run.sh: the targets test decoding, recovery and
// the queue's logic, not the disk, and the fsyncs of Open, Compact and
// Close on a loaded disk made the seed corpus of FuzzOps alone take most
// of the limit.
func TestMain(m *testing.M) {
	if os.Getenv("TMPDIR") == "" {
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			if f, err := os.CreateTemp("/dev/shm", "walq-fuzz-probe"); err == nil {
				f.Close()
				os.Remove(f.Name())
				os.Setenv("TMPDIR", "/dev/shm")
			}
		}
	}
	testrule.Main(m)
}
