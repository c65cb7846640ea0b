package state

import "fmt"

// Record types. Each is the type byte of a log record's envelope. These
// values are part of the on-disk format: they are frozen, and a new kind of
// record gets a new number.
const (
	TypePut        byte = 1  // new items (one record for a whole PutBatch)
	TypeLease      byte = 2  // a delivery starts; its LSN is the receipt
	TypeExtend     byte = 3  // heartbeat: a lease's end moves
	TypeAck        byte = 4  // a lease ends in success; the item is gone
	TypeNack       byte = 5  // a lease ends in failure reported by the caller
	TypeExpire     byte = 6  // a lease ran out (timer or recovery)
	TypeDeadLetter byte = 7  // a lease ends in permanent failure
	TypeDiscard    byte = 8  // waiting items reached their deadline
	TypeRedrive    byte = 9  // dead letters go back to waiting
	TypePurge      byte = 10 // dead letters are dropped for good

	// Named queues. A queue's creation is a record of the directory (queue
	// field 0); the others carry the queue they act on.
	TypeCreateQueue byte = 11 // a named queue is created; its ID is this record's LSN
	TypeSetQueue    byte = 12 // a queue's recorded settings change
	TypePauseQueue  byte = 13 // a queue pauses (until a time, or until resumed) or resumes
	TypeDeleteQueue byte = 14 // a queue and everything in it are gone
	TypeMove        byte = 15 // dead letters are redriven into another queue

	// Bodies on disk. A relocate record is a record of the directory
	// (queue field 0): it may name items of any queue.
	TypeRelocate byte = 16 // stored bodies are copied forward in the log

	// TypeDelete removes stored items in any state (an operator's call).
	TypeDelete byte = 17

	// LastType is the highest record type this build knows. A record of a
	// higher type, in a frame that verified, was written by a newer walq.
	LastType = TypeDelete
)

// TypeName names a record type for logs and tools.
func TypeName(t byte) string {
	switch t {
	case TypePut:
		return "put"
	case TypeLease:
		return "lease"
	case TypeExtend:
		return "extend"
	case TypeAck:
		return "ack"
	case TypeNack:
		return "nack"
	case TypeExpire:
		return "expire"
	case TypeDeadLetter:
		return "deadletter"
	case TypeDiscard:
		return "discard"
	case TypeRedrive:
		return "redrive"
	case TypePurge:
		return "purge"
	case TypeCreateQueue:
		return "create-queue"
	case TypeSetQueue:
		return "set-queue"
	case TypePauseQueue:
		return "pause-queue"
	case TypeDeleteQueue:
		return "delete-queue"
	case TypeMove:
		return "move"
	case TypeRelocate:
		return "relocate"
	case TypeDelete:
		return "delete"
	}
	return fmt.Sprintf("type%d", t)
}

// TypeByName is the inverse of TypeName (0 when unknown).
func TypeByName(name string) byte {
	for t := TypePut; t <= LastType; t++ {
		if TypeName(t) == name {
			return t
		}
	}
	return 0
}

// Record is one change to the state. Every input that is not a pure function
// of earlier records (the time, a due time chosen with jitter, whether an
// ending dead-letters) travels inside the record, so replay needs no clock,
// no randomness and no options.
//
// Times are wall-clock Unix nanoseconds.
type Record interface {
	Type() byte
	// At is the time the record was made.
	At() int64
}

// NewItem is one item of a Put record. IDs are not stored: applying the
// record gives consecutive IDs from the state's counter, so the same
// records always yield the same IDs.
type NewItem struct {
	Body []byte
	// BodyOffset is where Body lies in the record's encoding; Encode and
	// Decode set it, and the state adds it to the record's place in its
	// segment to find the body on disk.
	BodyOffset int
	Due        int64 // when it may first be delivered (Time + delay)
	Deadline   int64 // 0: none; no delivery starts at or after it
	Priority   int64
	Key        string
}

// Put adds items.
type Put struct {
	Time  int64
	Items []NewItem
}

// Lease starts a delivery of the item: attempt and delivery counts go up.
type Lease struct {
	Time     int64
	ID       uint64
	LeaseEnd int64
}

// Extend moves the end of the lease named by Receipt.
type Extend struct {
	Time     int64
	Receipt  uint64
	LeaseEnd int64
}

// Ack ends the lease named by Receipt in success.
type Ack struct {
	Time    int64
	Receipt uint64
}

// End ends the lease named by Receipt without success. Kind is TypeNack,
// TypeExpire or TypeDeadLetter. When Dead is set the item goes to the dead
// letters; otherwise it waits until Due, or is discarded when Due is at or
// after its deadline.
type End struct {
	Kind    byte
	Time    int64
	Receipt uint64
	Cause   string
	Due     int64
	Dead    bool
}

// Discard drops waiting items whose deadline has come.
type Discard struct {
	Time int64
	IDs  []uint64
}

// Redrive puts dead letters back to waiting, ready at Time, attempts reset.
type Redrive struct {
	Time int64
	IDs  []uint64
}

// Purge drops dead letters; with All set, every dead letter at that point.
type Purge struct {
	Time int64
	IDs  []uint64
	All  bool
}

// Delete removes stored items of its queue, whatever their state: waiting,
// leased (the lease ends with it: an ack or nack with its receipt finds no
// lease) or dead. Their keys are released as on an ack. It is an
// operator's call, counted with the purges.
type Delete struct {
	Time int64
	IDs  []uint64
}

// CreateQueue creates the named queue Name with its settings.
type CreateQueue struct {
	Time     int64
	Name     string
	Settings Settings
}

// SetQueue replaces a queue's recorded settings.
type SetQueue struct {
	Time     int64
	Settings Settings
}

// PauseQueue pauses a queue until Until (math.MaxInt64: until resumed);
// Until 0 resumes it. A paused queue takes puts and delivers nothing.
type PauseQueue struct {
	Time  int64
	Until int64
}

// DeleteQueue deletes a queue with its items, keys, counters and dead
// letters. Unless Force is set, it applies only to a queue with no open
// lease.
type DeleteQueue struct {
	Time  int64
	Force bool
}

// Move redrives dead letters into the queue Target: they keep their IDs
// and keys, wait ready at Time with their attempts reset.
type Move struct {
	Time   int64
	Target uint64
	IDs    []uint64
}

// Relocate copies the bodies of stored items forward in the log, so that
// the segments that held them can be removed, or into the log at all, for
// bodies a snapshot of an earlier version held. It changes nothing else:
// each body must be the item's own (its length and CRC-32C match).
type Relocate struct {
	Time  int64
	Items []Relocated
}

// Relocated is one body of a Relocate record.
type Relocated struct {
	ID   uint64
	Body []byte
	// BodyOffset is where Body lies in the record's encoding (see NewItem).
	BodyOffset int
}

func (*Relocate) Type() byte  { return TypeRelocate }
func (r *Relocate) At() int64 { return r.Time }

func (*CreateQueue) Type() byte { return TypeCreateQueue }
func (*SetQueue) Type() byte    { return TypeSetQueue }
func (*PauseQueue) Type() byte  { return TypePauseQueue }
func (*DeleteQueue) Type() byte { return TypeDeleteQueue }
func (*Move) Type() byte        { return TypeMove }

func (r *CreateQueue) At() int64 { return r.Time }
func (r *SetQueue) At() int64    { return r.Time }
func (r *PauseQueue) At() int64  { return r.Time }
func (r *DeleteQueue) At() int64 { return r.Time }
func (r *Move) At() int64        { return r.Time }

func (*Put) Type() byte     { return TypePut }
func (*Lease) Type() byte   { return TypeLease }
func (*Extend) Type() byte  { return TypeExtend }
func (*Ack) Type() byte     { return TypeAck }
func (r *End) Type() byte   { return r.Kind }
func (*Discard) Type() byte { return TypeDiscard }
func (*Redrive) Type() byte { return TypeRedrive }
func (*Purge) Type() byte   { return TypePurge }
func (*Delete) Type() byte  { return TypeDelete }

func (r *Put) At() int64     { return r.Time }
func (r *Lease) At() int64   { return r.Time }
func (r *Extend) At() int64  { return r.Time }
func (r *Ack) At() int64     { return r.Time }
func (r *End) At() int64     { return r.Time }
func (r *Discard) At() int64 { return r.Time }
func (r *Redrive) At() int64 { return r.Time }
func (r *Purge) At() int64   { return r.Time }
func (r *Delete) At() int64  { return r.Time }

// Encode appends the msgpack body of rec to dst.
func Encode(dst []byte, rec Record) ([]byte, error) { return encode(dst, rec, nil, nil) }

// EncodeWithFields is Encode with tagged fields (fields.go): fields after
// the record's own, and items[i] after the put's item i. It is how a
// feature writes the fields it owns; this build writes none.
func EncodeWithFields(dst []byte, rec Record, fields Fields, items []Fields) ([]byte, error) {
	if err := checkFields(fields); err != nil {
		return dst, fmt.Errorf("encode %s record: %w", TypeName(rec.Type()), err)
	}
	if len(items) > 0 {
		p, ok := rec.(*Put)
		if !ok || len(items) > len(p.Items) {
			return dst, fmt.Errorf("encode %s record: fields for %d items", TypeName(rec.Type()), len(items))
		}
		for i, fs := range items {
			if err := checkFields(fs); err != nil {
				return dst, fmt.Errorf("encode put record: item %d: %w", i, err)
			}
		}
	}
	return encode(dst, rec, fields, items)
}

func encode(dst []byte, rec Record, ext Fields, items []Fields) ([]byte, error) {
	b := dst
	switch r := rec.(type) {
	case *Put:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendArrayLen(b, len(r.Items))
		for i := range r.Items {
			n := &r.Items[i]
			var itemExt Fields
			if i < len(items) {
				itemExt = items[i]
			}
			b = appendArrayLen(b, extLen(5, itemExt))
			b = appendBin(b, n.Body)
			n.BodyOffset = len(b) - len(dst) - len(n.Body)
			b = appendInt(b, n.Due)
			b = appendInt(b, n.Deadline)
			b = appendInt(b, n.Priority)
			b = appendStr(b, n.Key)
			b = appendFields(b, itemExt)
		}
		b = appendFields(b, ext)
	case *Lease:
		b = appendArrayLen(b, extLen(3, ext))
		b = appendInt(b, r.Time)
		b = appendUint(b, r.ID)
		b = appendInt(b, r.LeaseEnd)
		b = appendFields(b, ext)
	case *Extend:
		b = appendArrayLen(b, extLen(3, ext))
		b = appendInt(b, r.Time)
		b = appendUint(b, r.Receipt)
		b = appendInt(b, r.LeaseEnd)
		b = appendFields(b, ext)
	case *Ack:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendUint(b, r.Receipt)
		b = appendFields(b, ext)
	case *End:
		b = appendArrayLen(b, extLen(6, ext))
		b = appendUint(b, uint64(r.Kind))
		b = appendInt(b, r.Time)
		b = appendUint(b, r.Receipt)
		b = appendStr(b, r.Cause)
		b = appendInt(b, r.Due)
		b = appendBool(b, r.Dead)
		b = appendFields(b, ext)
	case *Discard:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendIDs(b, r.IDs)
		b = appendFields(b, ext)
	case *Redrive:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendIDs(b, r.IDs)
		b = appendFields(b, ext)
	case *Purge:
		b = appendArrayLen(b, extLen(3, ext))
		b = appendInt(b, r.Time)
		b = appendIDs(b, r.IDs)
		b = appendBool(b, r.All)
		b = appendFields(b, ext)
	case *Delete:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendIDs(b, r.IDs)
		b = appendFields(b, ext)
	case *CreateQueue:
		b = appendArrayLen(b, extLen(3, ext))
		b = appendInt(b, r.Time)
		b = appendStr(b, r.Name)
		b = appendSettings(b, r.Settings)
		b = appendFields(b, ext)
	case *SetQueue:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendSettings(b, r.Settings)
		b = appendFields(b, ext)
	case *PauseQueue:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendInt(b, r.Until)
		b = appendFields(b, ext)
	case *DeleteQueue:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendBool(b, r.Force)
		b = appendFields(b, ext)
	case *Move:
		b = appendArrayLen(b, extLen(3, ext))
		b = appendInt(b, r.Time)
		b = appendUint(b, r.Target)
		b = appendIDs(b, r.IDs)
		b = appendFields(b, ext)
	case *Relocate:
		b = appendArrayLen(b, extLen(2, ext))
		b = appendInt(b, r.Time)
		b = appendArrayLen(b, len(r.Items))
		for i := range r.Items {
			n := &r.Items[i]
			b = appendArrayLen(b, 2)
			b = appendUint(b, n.ID)
			b = appendBin(b, n.Body)
			n.BodyOffset = len(b) - len(dst) - len(n.Body)
		}
		b = appendFields(b, ext)
	default:
		return dst, fmt.Errorf("encode: unknown record %T", rec)
	}
	return b, nil
}

// Decode parses the body of a record of type typ. Byte slices in the result
// are copies: the record may outlive body. It never panics, whatever body
// holds.
func Decode(typ byte, body []byte) (Record, error) { return decode(typ, body, false) }

// DecodeAlias is Decode with item bodies that alias body: for replay,
// which applies the record at once and keeps no body (the state keeps
// where a body is, not its bytes), so no body is copied.
func DecodeAlias(typ byte, body []byte) (Record, error) { return decode(typ, body, true) }

func decode(typ byte, body []byte, alias bool) (Record, error) {
	d := &decoder{b: body}
	bin := d.bin
	if alias {
		bin = d.bin0
	}
	var rec Record
	switch typ {
	case TypePut:
		ext := d.arrayExt(2)
		r := &Put{Time: d.int()}
		n := d.arrayLen(-1)
		if n > 0 {
			r.Items = make([]NewItem, n)
		}
		for i := 0; i < n && d.err == nil; i++ {
			it := &r.Items[i]
			itemExt := d.arrayExt(5)
			it.Body = bin()
			it.BodyOffset = d.off - len(it.Body)
			it.Due = d.int()
			it.Deadline = d.int()
			it.Priority = d.int()
			it.Key = d.str()
			if itemExt {
				d.skipFields()
			}
		}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeLease:
		ext := d.arrayExt(3)
		r := &Lease{Time: d.int(), ID: d.uint(), LeaseEnd: d.int()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeExtend:
		ext := d.arrayExt(3)
		r := &Extend{Time: d.int(), Receipt: d.uint(), LeaseEnd: d.int()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeAck:
		ext := d.arrayExt(2)
		r := &Ack{Time: d.int(), Receipt: d.uint()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeNack, TypeExpire, TypeDeadLetter:
		ext := d.arrayExt(6)
		r := &End{}
		kind := d.uint()
		r.Time, r.Receipt, r.Cause, r.Due, r.Dead = d.int(), d.uint(), d.str(), d.int(), d.bool()
		if ext {
			d.skipFields()
		}
		if d.err == nil && kind != uint64(typ) {
			d.fail("kind %d does not match the record type %d", kind, typ)
		}
		r.Kind = typ
		rec = r
	case TypeDiscard:
		ext := d.arrayExt(2)
		r := &Discard{Time: d.int(), IDs: d.ids()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeRedrive:
		ext := d.arrayExt(2)
		r := &Redrive{Time: d.int(), IDs: d.ids()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypePurge:
		ext := d.arrayExt(3)
		r := &Purge{Time: d.int(), IDs: d.ids(), All: d.bool()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeDelete:
		ext := d.arrayExt(2)
		r := &Delete{Time: d.int(), IDs: d.ids()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeCreateQueue:
		ext := d.arrayExt(3)
		r := &CreateQueue{Time: d.int(), Name: d.str(), Settings: d.settings()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeSetQueue:
		ext := d.arrayExt(2)
		r := &SetQueue{Time: d.int(), Settings: d.settings()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypePauseQueue:
		ext := d.arrayExt(2)
		r := &PauseQueue{Time: d.int(), Until: d.int()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeDeleteQueue:
		ext := d.arrayExt(2)
		r := &DeleteQueue{Time: d.int(), Force: d.bool()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeMove:
		ext := d.arrayExt(3)
		r := &Move{Time: d.int(), Target: d.uint(), IDs: d.ids()}
		if ext {
			d.skipFields()
		}
		rec = r
	case TypeRelocate:
		ext := d.arrayExt(2)
		r := &Relocate{Time: d.int()}
		n := d.arrayLen(-1)
		if n > 0 {
			r.Items = make([]Relocated, n)
		}
		for i := 0; i < n && d.err == nil; i++ {
			it := &r.Items[i]
			d.arrayLen(2)
			it.ID = d.uint()
			it.Body = bin()
			it.BodyOffset = d.off - len(it.Body)
		}
		if ext {
			d.skipFields()
		}
		rec = r
	default:
		return nil, fmt.Errorf("unknown record type %d", typ)
	}
	if err := d.end(); err != nil {
		return nil, fmt.Errorf("decode %s record: %w", TypeName(typ), err)
	}
	return rec, nil
}
