package rebuild

import (
	"fmt"
	"path/filepath"

	"github.com/walq/walq/internal/layout"
	"github.com/walq/walq/state"
	"github.com/walq/walq/wal"
)

// Bodies reads the bodies of a state rebuilt from a directory: from the
// log, with one positioned read each, checked against the CRC the state
// holds; or from the state itself for the bodies of a snapshot of an
// earlier version that no Relocate has moved into the log. It keeps a
// bounded number of files open and is safe to use while a queue writes
// and compacts the directory (a body whose segment a compaction removed
// reads as wal.ErrBodyGone: rebuild the state and look again).
type Bodies struct {
	r *wal.BodyReader
}

// NewBodies returns a reader of the bodies stored in the queue directory
// dir. Close it when done.
func NewBodies(dir string) *Bodies {
	r := wal.NewBodyReader(wal.OSFS(), filepath.Join(dir, layout.LogDirName), 0)
	r.SetKeepDir(filepath.Join(dir, layout.BodiesDirName))
	return &Bodies{r: r}
}

// Body returns the body of it, an item of st.
func (b *Bodies) Body(st *state.State, it *state.Item) ([]byte, error) {
	ref := it.Body
	switch {
	case ref.Len == 0:
		return nil, nil
	case ref.LSN == 0:
		if body, ok := st.Inline(it.ID); ok {
			return body, nil
		}
		return nil, fmt.Errorf("item %d: its body is neither in the log nor in the state", it.ID)
	case ref.Off == 0:
		return nil, fmt.Errorf("item %d: its body in record %d has no place on disk", it.ID, ref.LSN)
	}
	body := make([]byte, ref.Len)
	if err := b.r.ReadAt(ref.LSN, ref.Off, body); err != nil {
		return nil, fmt.Errorf("item %d: %w", it.ID, err)
	}
	if state.BodySum(body) != ref.Sum {
		return nil, fmt.Errorf("item %d: its body (record %d, offset %d, %d bytes) fails its crc", it.ID, ref.LSN, ref.Off, ref.Len)
	}
	return body, nil
}

// Close closes the files it holds open.
func (b *Bodies) Close() error { return b.r.Close() }
