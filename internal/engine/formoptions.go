package engine

import (
	"fmt"

	"github.com/snapid/snapid/internal/idform"
)

// formOptions are the options of the id form.
type formOptions struct {
	form   Format
	node   uint64 // WithNodeNumber (0: not set)
	stride uint64 // WithStride (0: not set)
	maxID  uint64 // WithMaxID (0: the form's default)
}

// WithFormat sets the form of the ids UniqueID, AppendUniqueID and NextID
// hand out (default FormatName). The numeric forms need a node number:
// with WithRegistry the registry's (NumberRegistry), otherwise
// WithNodeNumber; FormatStriped also a stride (the registry's, or
// WithStride). In FormatDecimal numbers ending in 0 are skipped (Next
// too), and NextN is refused (its range would hold some): NextIDsContext
// takes n decimal ids with one counter update.
func WithFormat(f Format) Option {
	return func(o *options) error {
		if !f.Valid() {
			return fmt.Errorf("snapid: %w: unknown id form %d", ErrInvalidOption, uint8(f))
		}
		o.form.form = f
		return nil
	}
}

// WithNodeNumber sets the node number the numeric forms carry (1 to
// MaxNodeNumber). Without a registry it is how the number is given, and
// the host's name bindings (see DefaultBindingDir) refuse one number
// under two names. With a registry the registry's number is used, and a
// different one given here is refused (ErrNumberMismatch).
func WithNodeNumber(n uint64) Option {
	return func(o *options) error {
		if err := idform.CheckNodeNumber(n, 0); err != nil {
			return err
		}
		o.form.node = n
		return nil
	}
}

// WithStride sets the stride of FormatStriped (2 to MaxNodeNumber+1):
// ids are number × stride + node number. Every host of a cluster must use
// the same stride; with a registry it is the one recorded there
// (NumberRegistry.SetStride), and a different one given here is refused.
func WithStride(s uint64) Option {
	return func(o *options) error {
		if err := idform.CheckStride(s); err != nil {
			return err
		}
		o.form.stride = s
		return nil
	}
}

// WithMaxID sets the largest id the Generator hands out: for FormatStriped
// the integer (default math.MaxInt64; MaxSafeInteger for JavaScript, math.MaxUint32
// for 32 bits), for the other forms the counter's number. Past it every
// call returns ErrExhausted; nothing ever overflows. max must be at least
// 1.
func WithMaxID(max uint64) Option {
	return func(o *options) error {
		if max == 0 {
			return fmt.Errorf("snapid: %w: WithMaxID(0): the first id is 1", ErrInvalidOption)
		}
		o.form.maxID = max
		return nil
	}
}

// standaloneForm checks the form options before anything is created and
// returns the form when it needs nothing from a registry; with a registry
// the node number (and the stride, unless given) come from it after the
// claim (see numberedForm).
func standaloneForm(o *options) (idform.Form, error) {
	f := o.form
	if o.reg.registry != nil && f.form != FormatName {
		if o.reg.numbers == nil {
			// A registry that gives no numbers: the form is the one
			// configured, checked whole now, before the claim.
			if _, err := configuredForm(f); err != nil {
				return idform.Form{}, err
			}
		}
		return registryForm(f)
	}
	return configuredForm(f)
}

// configuredForm is the form f configures, its node number and stride
// given (not a registry's).
func configuredForm(f formOptions) (idform.Form, error) {
	switch {
	case f.form == FormatName && (f.node != 0 || f.stride != 0):
		// A number given for the name form is still bound (so that
		// switching forms later cannot meet another name's ids).
	case f.form != FormatName && f.node == 0:
		return idform.Form{}, fmt.Errorf("snapid: %w: the %s form needs a node number: give one, or a registry that gives them", ErrInvalidOption, f.form)
	case f.form == FormatStriped && f.stride == 0:
		return idform.Form{}, fmt.Errorf("snapid: %w: the striped form needs the cluster's stride: give it, or a registry that records it", ErrInvalidOption)
	}
	return idform.New(f.form, f.node, f.stride, f.maxID)
}

// registryForm checks a numeric form whose node number (and stride,
// unless given) a registry gives after the claim: it is completed then
// (see numberedForm), and what can be checked now is, before anything is
// made or claimed.
func registryForm(f formOptions) (idform.Form, error) {
	if f.form == FormatStriped && f.node != 0 && f.stride != 0 {
		if _, err := idform.New(f.form, f.node, f.stride, f.maxID); err != nil {
			return idform.Form{}, err
		}
	}
	if f.form == FormatStriped && f.stride != 0 && f.maxID != 0 && f.maxID < f.stride+1 {
		return idform.Form{}, fmt.Errorf("snapid: %w: bound %d is below the first striped id of any node (stride %d)", ErrInvalidOption, f.maxID, f.stride)
	}
	return idform.Form{Format: f.form}, nil
}
