package walq

import (
	"errors"
	"fmt"
	"testing"
)

// TestReceiptOfNoQueueIsNotDeleted: a receipt naming a queue that
// never existed in this directory (a hand-edited or corrupted text: queue
// 0x3039, an LSN no record created a queue at) is answered "queue deleted"
// (ErrQueueDeleted, "which is deleted"): otherQueueLocked takes any queue
// the state does not hold for a deleted one. An operator is told to look
// for a delete that never happened; ErrQueueDeleted is documented for "a
// receipt of a deleted queue".
func TestReceiptOfNoQueueIsNotDeleted(t *testing.T) {
	q, _, _ := testQueue(t, Options{})
	mustOpenQueue(t, q, "exports", QueueOptions{}) // queue 1; 0x3039 is no queue
	r, err := ParseReceipt(fmt.Sprintf("%x-3039-1", q.dirID[:]))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(r); errors.Is(err, ErrQueueDeleted) {
		t.Fatalf("Ack with a receipt of a queue that never existed: %v", err)
	}
}
