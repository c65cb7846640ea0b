package jetstream

import (
	"strings"
	"testing"

	"github.com/walq/walq"
)

// TestDeadLetterFloorHoldsTheWidestLastAttempt: for an item whose body
// is the largest Put takes under a limit (deadFloor), the dead letter with
// the widest history (ten attempts whose errors JSON writes 6 bytes a
// byte) and the widest cause (512 bytes that travel in base64) is cut to
// the limit keeping its last attempt, its error whole, and at least
// causeFloor bytes of its cause. (Before, the floor counted the error as
// 512 plain bytes, and the cut dropped the cause, then the last attempt.)
func TestDeadLetterFloorHoldsTheWidestLastAttempt(t *testing.T) {
	const limit = 64 << 10
	for _, key := range []string{"", "k", strings.Repeat("\x01", walq.MaxKeySize)} {
		item := itemHeader(walq.Item{Key: key}, nil)
		n := limit - deadFloor("jobs", item)
		var hist []attempt
		for range historyLen {
			hist = append(hist, attempt{Start: 1, End: 2, How: "nack", Error: strings.Repeat("<", maxErrorBytes)})
		}
		cause := strings.Repeat("\x01", maxErrorBytes)
		h := deadHeader("jobs", item, 1<<40, 0, 10, 10, 1<<40, hist, cause)
		if err := fitTo(h, n, limit); err != nil {
			t.Fatalf("key of %d B: %v", len(key), err)
		}
		if size := headerSize(h) + n; size > limit {
			t.Fatalf("key of %d B: %d B, over the limit %d", len(key), size, limit)
		}
		got, err := decodeHistory(h.Get(HeaderHistory))
		if err != nil || len(got) == 0 || got[len(got)-1].Error != hist[0].Error {
			t.Fatalf("key of %d B: history %d entries (%v): want the last attempt whole", len(key), len(got), err)
		}
		if c := text(h, HeaderError); !strings.HasPrefix(c, cause[:causeFloor]) || !strings.Contains(c, "cut to the server's max_payload") {
			t.Fatalf("key of %d B: cause %q: want at least %d bytes of it and the cut said", len(key), c[:min(len(c), 40)], causeFloor)
		}
	}
}
