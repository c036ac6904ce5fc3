package cli

import (
	"context"
	"fmt"

	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// InProcess is what a driver running snapctl's commands inside its own
// process (the simulator, package internal/sim) gives them beyond Env,
// so that they act on its registry and through its seams. It is for
// in-process drivers and tests only: snapctl itself never sets it.
type InProcess struct {
	// Registry is what register, release (with or without --force) and
	// setup use instead of connecting to Cassandra; the registry flags
	// are then not needed, setup creates no schema (the registry exists)
	// and records --stride in it. The commands do not close it.
	Registry registry.NumberRegistry
	// Options are added, last, to the library's options of the commands
	// that open the counter or release it (the driver's file seams,
	// clock, host information, binding directory).
	Options []engine.Option
}

// claimRegistry is the registry of register and release: the in-process
// driver's if it gave one, else Cassandra's (needRegistry); done closes
// what was connected.
func (c *cli) claimRegistry(ctx context.Context, r *registryFlags, cmd string) (reg registry.Registry, done func(), err error) {
	if c.inproc != nil && c.inproc.Registry != nil {
		return c.inproc.Registry, func() {}, nil
	}
	cr, err := c.needRegistry(ctx, r, cmd)
	if err != nil {
		return nil, nil, err
	}
	return cr, func() { cr.Close() }, nil
}

// inprocOptions are the in-process driver's library options, if any.
func (c *cli) inprocOptions() []engine.Option {
	if c.inproc == nil {
		return nil
	}
	return c.inproc.Options
}

// setupInProcess is setup on the in-process driver's registry: nothing
// to create; the stride, if given, is recorded.
func (c *cli) setupInProcess(ctx context.Context, stride uint64, strideSet bool) error {
	if strideSet {
		if _, err := c.inproc.Registry.SetStride(ctx, stride); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(c.stdout, "stride %d recorded for the cluster's striped ids\n", stride); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(c.stdout, "registry already exists; nothing created (in-process registry)")
	return err
}

// orNil is reg as a registry.Registry, nil when no registry is configured.
func orNil(reg *cassandra.Registry) registry.Registry {
	if reg == nil {
		return nil
	}
	return reg
}
