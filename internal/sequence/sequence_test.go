package sequence

import (
	"errors"
	"testing"

	"github.com/snapid/snapid/internal/errs"
)

func TestNewOptions(t *testing.T) {
	t.Parallel()
	o, err := NewOptions()
	if err != nil || o.block != DefaultSequenceBlock || o.lease != DefaultSequenceLease {
		t.Fatalf("NewOptions() = %+v, %v; want block %d, lease %d", o, err, DefaultSequenceBlock, DefaultSequenceLease)
	}
	o, err = NewOptions(nil, SequenceBlock(7), SequenceLeaseSize(MaxSequenceLease))
	if err != nil || o.block != 7 || o.lease != MaxSequenceLease {
		t.Fatalf("NewOptions(SequenceBlock(7), SequenceLeaseSize(max)) = %+v, %v", o, err)
	}
	for _, opt := range []SequenceOption{SequenceBlock(0), SequenceLeaseSize(0), SequenceLeaseSize(MaxSequenceLease + 1)} {
		if _, err := NewOptions(opt); !errors.Is(err, errs.ErrInvalidOption) {
			t.Errorf("NewOptions: %v; want ErrInvalidOption", err)
		}
	}
}
