package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// startFlags are --force and --start of register and release.
type startFlags struct {
	force    bool
	start    uint64
	startSet bool
}

func (c *cli) addStartFlags(sf *startFlags, forceHelp string) {
	c.fs.BoolVar(&sf.force, "force", false, forceHelp)
	c.fs.Var((*decimal)(&sf.start), "start", "with --force: the next number the name may issue (above every number it issued)")
}

func (sf *startFlags) check(fs *flag.FlagSet) error {
	fs.Visit(func(f *flag.Flag) { sf.startSet = sf.startSet || f.Name == "start" })
	switch {
	case sf.force && (!sf.startSet || sf.start == 0):
		return usageError{"--force needs --start N (N >= 1) above every number the name has issued"}
	case !sf.force && sf.startSet:
		return usageError{"--start only goes with --force"}
	}
	return nil
}

// parseStartCommand parses the flags of register and release and resolves
// the node name.
func (c *cli) parseStartCommand(cmd, forceHelp string, args []string) (rf registryFlags, sf startFlags, name string, err error) {
	fs := c.newFlags(cmd)
	c.addRegistryFlags(&rf)
	c.addCreateFlags(&rf)
	c.addStartFlags(&sf, forceHelp)
	if err = c.parse(args); err != nil {
		return rf, sf, "", err
	}
	if err = sf.check(fs); err != nil {
		return rf, sf, "", err
	}
	name, err = c.resolveName()
	return rf, sf, name, err
}

// cmdRegister claims the name for this counter and returns.
func cmdRegister(ctx context.Context, c *cli, args []string) error {
	rf, sf, name, err := c.parseStartCommand("register",
		"take the name from an active holder of another owner (only if it is gone for good)", args)
	if err != nil {
		return err
	}
	path, err := c.resolveCounter()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, done, err := c.claimRegistry(ctx, &rf, "register")
	if err != nil {
		return err
	}
	defer done()
	if err := c.prepareDefaultDir(); err != nil {
		return err
	}
	// register is how a host claims on purpose, also a name it released.
	opts := append(c.options(), engine.WithRegistry(reg), engine.WithReclaim())
	opts = append(opts, c.inprocOptions()...)
	if sf.force {
		opts = append(opts, engine.WithTakeover(sf.start-1))
	}
	g, err := engine.OpenContext(ctx, path, name, opts...)
	if err != nil {
		return heldHere(ctx, reg, name, path, err)
	}
	if err := g.Close(); err != nil {
		return err
	}
	owner, err := admin.OwnerToken(path)
	if err != nil {
		return err
	}
	last, err := admin.ReadCounterContext(ctx, path)
	if err != nil {
		return err
	}
	if sf.force {
		fmt.Fprintf(c.stderr, "snapctl: WARNING: %q TAKEN OVER by force for %s; the next number is %d\n", name, path, last+1)
		if last+1 > sf.start {
			// Never lowered: --start is a floor, the counter or the old
			// holder's reserved mark was higher.
			fmt.Fprintf(c.stderr, "snapctl: notice: the next number is %d, not --start %d: this counter or the registry's reserved mark for %q was already at %d, and neither is ever lowered\n",
				last+1, sf.start, name, last)
		}
	}
	// The token itself is a secret (whoever has it passes a claim as this
	// host): only its fingerprint is printed.
	_, err = fmt.Fprintf(c.stdout, "registered %s for %s (owner %s, next number %d)\n", name, path, registry.OwnerID(owner), last+1)
	return err
}

// cmdRelease releases the name held by this counter, or with --force the
// name held by a holder that is gone.
func cmdRelease(ctx context.Context, c *cli, args []string) error {
	rf, sf, name, err := c.parseStartCommand("release",
		"release the name whoever holds it (only for a holder that is gone for good)", args)
	if err != nil {
		return err
	}
	if sf.force && c.flagGiven("name") && c.flagGiven("counter") {
		// The name is released whoever holds it: a counter only says
		// which name, when --name does not.
		return usageError{"--counter does nothing with --force and --name: release --force releases the name given, whoever holds it; drop --counter"}
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, done, err := c.claimRegistry(ctx, &rf, "release")
	if err != nil {
		return err
	}
	defer done()
	var final uint64
	if sf.force {
		final, err = admin.ForceRelease(ctx, reg, name, sf.start)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stderr, "snapctl: WARNING: %q RELEASED by force; its next holder starts above %d\n", name, final)
	} else {
		path, err := c.resolveCounter()
		if err != nil {
			return err
		}
		final, err = admin.Release(ctx, reg, path, name, append(c.options(), c.inprocOptions()...)...)
		if errors.Is(err, fs.ErrNotExist) {
			return hintError{err, fmt.Sprintf("nothing was changed; this host never registered %q with the counter %s, or that counter is gone (check --counter): "+
				"there is nothing to release here; to release a name whose holder is gone for good, 'snapctl release --force --start N'", name, path)}
		}
		if err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(c.stdout, "released %s (last number %d)\n", name, final)
	return err
}
