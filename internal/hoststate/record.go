package hoststate

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
)

// A record file is two slots of SlotSize bytes, as bbolt keeps two meta
// pages: each slot holds a whole copy of the record with a generation and
// a checksum, and a write goes to the slot the newest copy is not in, so a
// write torn by a crash or a power cut leaves the other copy whole. The
// reader takes the valid copy with the higher generation.
//
// A slot is: the magic "snapidR1", the payload's length (uint32, little
// endian), its CRC-32C, then the payload (JSON), zero padded.
const (
	SlotSize = 2048
	FileSize = 2 * SlotSize
	magic    = "snapidR1"
	header   = len(magic) + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Form is one id form a counter issued under a name: "name" (the default,
// name-number), "decimal" (node number.number) or "striped" (number ×
// stride + node number). Kind, Node and Stride identify it; a striped form
// is the one in use (Current) or was left when the counter held Upto.
type Form struct {
	Kind    string `json:"kind"`
	Node    uint64 `json:"node,omitempty"`
	Stride  uint64 `json:"stride,omitempty"`
	Upto    uint64 `json:"upto,omitempty"`
	Current bool   `json:"current,omitempty"`
}

// Record is what the host knows about one node name: which counter file
// issues under it, the forms it issued under, the node number the name
// holds, whether it was released, and how far the counter may have gone.
type Record struct {
	Name string `json:"name"`
	// The counter's identity: device and inode, and the path it was
	// opened at when the record was made (for messages: the identity
	// decides).
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	Path string `json:"path"`
	// Forms the counter issued under this name, oldest first; at most
	// one striped form is Current.
	Forms []Form `json:"forms,omitempty"`
	// Node is the node number a registry gave the name, 0 if none; Stride
	// the cluster's stride a registry gave with it, 0 if not known.
	Node   uint64 `json:"node,omitempty"`
	Stride uint64 `json:"stride,omitempty"`
	// Released: the name was released on this host; its processes do not
	// issue under it until it is claimed again on purpose.
	Released bool `json:"released,omitempty"`
	// Floor: the counter is known to have reached it (its value at the
	// last write of the record): a counter found below it was rolled
	// back, zeroed or made again, and is refused.
	Floor uint64 `json:"floor"`
	// Mark: no number above it was handed out from the counter. Kept a
	// step ahead of the counter, raised before the counter passes it, so
	// that the hot path writes the record once a step.
	Mark uint64 `json:"mark"`
	// Gen is raised at every write.
	Gen uint64 `json:"gen"`
	// Owner and Group are the record file's (from its status: not
	// stored).
	Owner uint32 `json:"-"`
	Group uint32 `json:"-"`
}

// ErrCorrupt: a record file with no valid copy, or of another size.
var ErrCorrupt = errors.New("damaged host record")

// FormIndex returns the index of the form f is (same Kind, Node and
// Stride) among the record's forms, -1 if none.
func (r *Record) FormIndex(f Form) int {
	for i, g := range r.Forms {
		if g.Kind == f.Kind && g.Node == f.Node && g.Stride == f.Stride {
			return i
		}
	}
	return -1
}

// HasForm reports whether f (its Kind, Node and Stride) is among the
// record's forms.
func (r *Record) HasForm(f Form) bool { return r.FormIndex(f) >= 0 }

// encodeSlot returns one slot holding r.
func encodeSlot(r Record) ([]byte, error) {
	p, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	if header+len(p) > SlotSize {
		return nil, fmt.Errorf("host record of %q: %d bytes, more than a slot holds (%d): too many forms (%d) used under the name; "+
			"a counter of its own for a new form, or a new name, starts a record afresh", r.Name, len(p), SlotSize-header, len(r.Forms))
	}
	b := make([]byte, SlotSize)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[len(magic):], uint32(len(p)))
	binary.LittleEndian.PutUint32(b[len(magic)+4:], crc32.Checksum(p, castagnoli))
	copy(b[header:], p)
	return b, nil
}

// decodeSlot returns the record a slot holds, or false if the slot is not
// a whole, valid copy.
func decodeSlot(b []byte) (Record, bool) {
	if len(b) != SlotSize || string(b[:len(magic)]) != magic {
		return Record{}, false
	}
	n := binary.LittleEndian.Uint32(b[len(magic):])
	if int(n) > SlotSize-header {
		return Record{}, false
	}
	p := b[header : header+int(n)]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(b[len(magic)+4:]) {
		return Record{}, false
	}
	var r Record
	if err := json.Unmarshal(p, &r); err != nil || r.Gen == 0 {
		return Record{}, false
	}
	return r, true
}

// decode returns the newest valid copy of a record file's content and the
// slot it is in.
func decode(b []byte, name string) (Record, int, error) {
	if len(b) != FileSize {
		return Record{}, 0, fmt.Errorf("%w: %d bytes, where a record has %d", ErrCorrupt, len(b), FileSize)
	}
	r0, ok0 := decodeSlot(b[:SlotSize])
	r1, ok1 := decodeSlot(b[SlotSize:])
	var r Record
	slot := 0
	switch {
	case ok0 && ok1 && r1.Gen > r0.Gen:
		r, slot = r1, 1
	case ok0:
		r = r0
	case ok1:
		r, slot = r1, 1
	default:
		return Record{}, 0, fmt.Errorf("%w: neither of its two copies is whole", ErrCorrupt)
	}
	if r.Name != name {
		return Record{}, 0, fmt.Errorf("%w: it is the record of %q, not of %q", ErrCorrupt, r.Name, name)
	}
	return r, slot, nil
}

// encode returns a whole new record file holding r in both slots.
func encode(r Record) ([]byte, error) {
	s, err := encodeSlot(r)
	if err != nil {
		return nil, err
	}
	return append(s, s...), nil
}
