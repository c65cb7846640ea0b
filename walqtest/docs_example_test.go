package walqtest_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/walq/walq"
	"github.com/walq/walq/walqtest"
)

// openMyEngine stands for the engine under test. Here it is walq's own
// queue, in the empty directory the suite names.
func openMyEngine(name string, visibility time.Duration, maxAttempts int, backoff func(int) time.Duration) (walqtest.Queue, error) {
	q, err := walq.Open(name, walq.Options{Visibility: visibility, MaxAttempts: maxAttempts, Backoff: backoff})
	if err != nil {
		return nil, err
	}
	return walqtest.Walq(q), nil
}

// A Target tells the suite how to open a fresh queue of the engine and
// what the engine offers; a test then calls walqtest.Run(t, target).
func ExampleRun() {
	target := walqtest.Target{
		Open: func(name string, cfg walqtest.Config) (walqtest.Queue, error) {
			return openMyEngine(name, cfg.Visibility, cfg.MaxAttempts, cfg.Backoff)
		},
		Caps: walqtest.Capabilities{Reopen: true, Priority: true},
	}

	// The suite opens each name it makes, an empty directory, as here.
	dir, _ := os.MkdirTemp("", "walqtest-example")
	defer os.RemoveAll(dir)
	q, err := target.Open(dir, walqtest.Config{Visibility: time.Minute, MaxAttempts: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	q.Put(context.Background(), []byte("job"))
	m, ok, err := q.TryGet()
	fmt.Println(string(m.Body), ok, err, q.Visibility())
	// Output: job true <nil> 1m0s
}
