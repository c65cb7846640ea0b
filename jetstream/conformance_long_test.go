//go:build long

package jetstream_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	walqjs "github.com/walq/walq/jetstream"
	"github.com/walq/walq/walqtest"
)

// urlEnv passes the test server's address to the worker process that the
// suite's KilledWorker behaviour starts.
const urlEnv = "WALQ_JETSTREAM_TEST_URL"

func target(url string) walqtest.Target {
	return walqtest.Target{
		Open: func(name string, cfg walqtest.Config) (walqtest.Queue, error) {
			return openQueue(url, dirName(name), "subject",
				walqjs.Options{KeyWindow: cfg.KeyWindow},
				walqjs.QueueOptions{
					Visibility:  cfg.Visibility,
					MaxAttempts: cfg.MaxAttempts,
					Backoff:     cfg.Backoff,
					Priorities:  []int{-1, 0, 1},
				})
		},
		Caps: caps,
	}
}

// TestConformance holds the adapter to walq's suite, on a server this test
// starts (file store in a temporary directory, SyncAlways).
func TestConformance(t *testing.T) {
	url := os.Getenv(urlEnv)
	if url == "" || os.Getenv("WALQTEST_KILLED_WORKER") == "" {
		s := startServer(t, t.TempDir(), 0)
		defer s.Shutdown()
		url = s.ClientURL()
		t.Setenv(urlEnv, url)
	}
	walqtest.Run(t, target(url))
}

// dirName is a Dir name for a suite name (a path).
func dirName(name string) string {
	s := sha256.Sum256([]byte(name))
	return "t" + hex.EncodeToString(s[:8])
}
