package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"strings"

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
	path := ""
	if !sf.force {
		if path, err = c.resolveCounter(); err != nil {
			return err
		}
	}
	final, err := c.release(ctx, &rf, sf, name, path)
	if errors.Is(err, engine.ErrRegistry) {
		return hintError{err, c.releaseFailedHint(err, name, path)}
	}
	if err != nil {
		return err
	}
	if sf.force {
		fmt.Fprintf(c.stderr, "snapctl: WARNING: %q RELEASED by force; its next holder starts above %d\n", name, final)
	}
	_, err = fmt.Fprintf(c.stdout, "released %s (last number %d)\n", name, final)
	return err
}

// release releases name in the registry: held by the counter at path, or
// with --force (path ""), whoever holds it.
func (c *cli) release(ctx context.Context, rf *registryFlags, sf startFlags, name, path string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	reg, done, err := c.claimRegistry(ctx, rf, "release")
	if err != nil {
		return 0, err
	}
	defer done()
	if sf.force {
		return admin.ForceRelease(ctx, reg, name, sf.start)
	}
	final, err := admin.Release(ctx, reg, path, name, append(c.options(), c.inprocOptions()...)...)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, hintError{err, fmt.Sprintf("nothing was changed; this host never registered %q with the counter %s, or that counter is gone (check --counter): "+
			"there is nothing to release here; to release a name whose holder is gone for good, 'snapctl release --force --start N'", name, path)}
	}
	return final, err
}

// releaseFailedHint says what a release of name that failed for the
// registry (err) left, and what to do: what to check, whether the registry
// may have released it (only once the release was sent), whether this
// host records it as released (path: the counter; "" with --force, which
// changes nothing on this host), and to run it again.
func (c *cli) releaseFailedHint(err error, name, path string) string {
	again := "run 'snapctl release' again once the registry answers"
	check := strings.TrimSuffix(registryHint(err), " and try again") // said by again
	if path == "" {
		return fmt.Sprintf("%s; %q was not released, unless the failure came as the release was sent ('snapctl names' shows which); "+
			"nothing was changed on this host; %s (with the same --force --start)", check, name, again)
	}
	hf, herr := admin.ReadHostFiles(path, c.options()...)
	switch {
	case herr != nil:
		return fmt.Sprintf("%s; %q was not released in the registry, unless the failure came as the release was sent ('snapctl names' shows which), "+
			"and whether this host records it as released could not be read (%s); %s", check, name, oneLine(herr.Error()), again)
	case hf.Released != name:
		return fmt.Sprintf("%s; %q was not released: nothing was changed, in the registry or on this host "+
			"(its programs may go on using the name); %s", check, name, again)
	}
	return fmt.Sprintf("%s; %q was not released in the registry, unless the failure came as the release was sent ('snapctl names' shows which); "+
		"this host already records it as released, so its programs refuse it; %s to finish the hand-over, or 'snapctl register' to keep the name here",
		check, name, again)
}
