package cli

import (
	"flag"
	"fmt"
	"math"

	"github.com/snapid/snapid/internal/engine"
)

// formFlags are the id form flags of snapctl next.
type formFlags struct {
	format         string
	node, stride   uint64
	maxID          uint64
	maxSafeInteger bool
	uint32         bool
}

func (f *formFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.format, "format", "name", "id form: name (<name>-<number>), decimal (<node number>.<number>; numbers ending in 0 are skipped) or striped (number × stride + node number)")
	fs.Var((*decimal)(&f.node), "node-number", "the node number of the numeric forms (without a registry; with one, the registry's is used)")
	fs.Var((*decimal)(&f.stride), "stride", "the cluster's stride of the striped form (the registry's, if it records one)")
	fs.Var((*decimal)(&f.maxID), "max-id", "the largest id (striped) or number (other forms) to hand out; past it: exhausted")
	fs.BoolVar(&f.maxSafeInteger, "max-safe-integer", false, "as --max-id 9007199254740991 (2^53-1, exact in a JavaScript number)")
	fs.BoolVar(&f.uint32, "uint32", false, "as --max-id 4294967295 (2^32-1)")
}

// options turns the flags set in fs into Options; bad values are usage
// errors, or refused by Open before anything is made.
func (f *formFlags) options(fs *flag.FlagSet) ([]engine.Option, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	form, err := engine.ParseFormat(f.format)
	if err != nil {
		return nil, usageError{"--format " + f.format + ": want name, decimal or striped"}
	}
	// A flag of another form would be taken and do nothing to the ids.
	switch {
	case set["node-number"] && form == engine.FormatName:
		return nil, usageError{"--node-number is for the numeric forms: give --format decimal or --format striped " +
			"(the name form, <name>-<number>, carries no node number)"}
	case set["stride"] && form != engine.FormatStriped:
		return nil, usageError{fmt.Sprintf("--stride is for the striped form: give --format striped (the %s form has no stride)", form)}
	}
	bounds := 0
	for _, b := range []bool{set["max-id"], f.maxSafeInteger, f.uint32} {
		if b {
			bounds++
		}
	}
	if bounds > 1 {
		return nil, usageError{"give one of --max-id, --max-safe-integer and --uint32"}
	}
	opts := []engine.Option{engine.WithFormat(form)}
	if set["node-number"] {
		opts = append(opts, engine.WithNodeNumber(f.node))
	}
	if set["stride"] {
		opts = append(opts, engine.WithStride(f.stride))
	}
	switch {
	case set["max-id"]:
		opts = append(opts, engine.WithMaxID(f.maxID))
	case f.maxSafeInteger:
		opts = append(opts, engine.WithMaxID(engine.MaxSafeInteger))
	case f.uint32:
		opts = append(opts, engine.WithMaxID(math.MaxUint32))
	}
	return opts, nil
}
