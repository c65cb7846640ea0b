package jetstream

import (
	"time"

	"github.com/walq/walq"
)

// systemClock is the clock a JetStream queue runs on: the server measures
// AckWait, NakWithDelay and schedules in real time, so the adapter cannot
// take an injected clock (walqtest.Capabilities.ManualClock is false).
type systemClock struct{}

var monoOrigin = time.Now()

func (systemClock) Now() time.Time                      { return time.Now() }
func (systemClock) Monotonic() time.Duration            { return time.Since(monoOrigin) }
func (systemClock) NewTimer(d time.Duration) walq.Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
