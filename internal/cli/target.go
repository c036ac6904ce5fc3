package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry"
)

// Which name and counter a command acts on: the flags given, else the
// defaults (the host's record of the counter's name, the per-user
// counter), and the per-user default directory made for it.

// resolveName returns the node name: --name, then $SNAPID_NAME, then the
// host name made into a name as Snap! does, with a notice on stderr.
func (c *cli) resolveName() (string, error) {
	name := c.orEnv("name", c.name, "SNAPID_NAME")
	if name != "" {
		return name, engine.ValidateName(name)
	}
	// The name the host's records give the counter, if any: the one it
	// issued under.
	path, err := c.resolveCounter()
	if err != nil {
		return "", err
	}
	if hf, err := admin.ReadHostFiles(path, c.options()...); err == nil && hf.Name != "" {
		fmt.Fprintf(c.stderr, "snapctl: notice: no --name or SNAPID_NAME; using %q, the name the host's record gives %s\n", hf.Name, path)
		return hf.Name, nil
	}
	host, err := c.hostname()
	if err != nil {
		return "", fmt.Errorf("no --name or SNAPID_NAME, and the host name is unknown: %w", err)
	}
	name, changed, err := engine.NameFromHostname(host)
	if err != nil {
		return "", fmt.Errorf("no --name or SNAPID_NAME, and %w", err)
	}
	notice := fmt.Sprintf("node name %q from the host name", name)
	if changed != "" {
		notice = fmt.Sprintf("node name %q (%s)", name, changed)
	}
	if c.defaultDir != "" {
		// snapctl's own per-user counter: a name of the user's own, so
		// that a trial leaves the host name to the programs an operator
		// configures (and to other users' trials).
		who, err := c.userName()
		if err != nil {
			return "", fmt.Errorf("no --name or SNAPID_NAME, and the user's name is unknown: %w", err)
		}
		user := who
		if strings.Trim(who, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || engine.ValidateName(name+"_"+who) != nil {
			// Not a node name as it is: the uid, which no two users
			// share (a mapping of the name could make two alike).
			user = "uid" + strconv.Itoa(os.Geteuid())
		}
		if engine.ValidateName(name+"_"+user) != nil {
			return "", fmt.Errorf("no --name or SNAPID_NAME, and the host name %q with the user's does not make a node name (%s): give --name", name, registry.NameRule)
		}
		name += "_" + user
		notice = fmt.Sprintf("node name %q from the host name and the user's (snapctl's own counter; the host name is left for configured programs)", name)
	}
	fmt.Fprintf(c.stderr, "snapctl: notice: no --name or SNAPID_NAME; using %s\n", notice)
	return name, nil
}

// resolveCounter returns the counter path: --counter, then
// $SNAPID_COUNTER, then the per-user default.
func (c *cli) resolveCounter() (string, error) {
	// SNAPID_BINDING_DIR goes to the library as WithBindingDir: a bad
	// value is named here by its variable.
	if d := c.getenv("SNAPID_BINDING_DIR"); d != "" {
		if err := admin.CheckBindingDir(d); err != nil {
			return "", fmt.Errorf("SNAPID_BINDING_DIR=%q: %w", d, err)
		}
	}
	if c.counter != "" {
		return c.counter, nil
	}
	if p := c.getenv("SNAPID_COUNTER"); p != "" && !c.flagGiven("counter") {
		c.counter = p
		return p, nil
	}
	p, err := c.defaultCounterPath()
	if err != nil {
		return "", fmt.Errorf("no --counter or SNAPID_COUNTER, and no home directory for the default: %w", err)
	}
	c.counter, c.defaultDir = p, filepath.Dir(p)
	return p, nil
}

// target resolves the node name and the counter path.
func (c *cli) target() (name, path string, err error) {
	if name, err = c.resolveName(); err != nil {
		return "", "", err
	}
	path, err = c.resolveCounter()
	return name, path, err
}

// auditTarget is target for the commands that look at a name (status,
// check-names): without --name or SNAPID_NAME, the name the counter is in
// use under (its session file records the claim), if any, rather than
// one derived from the host name, so that both look at the same name.
func (c *cli) auditTarget() (name, path string, err error) {
	if c.orEnv("name", c.name, "SNAPID_NAME") == "" {
		if path, err = c.resolveCounter(); err != nil {
			return "", "", err
		}
		if hf, err := admin.ReadHostFiles(path, c.options()...); err == nil && hf.SessionName != "" && hf.Released == "" {
			fmt.Fprintf(c.stderr, "snapctl: notice: no --name or SNAPID_NAME; using %q, the name the counter %s is in use under\n", hf.SessionName, path)
			return hf.SessionName, path, nil
		}
	}
	return c.target()
}

// prepareDefaultDir creates the per-user state directory when the counter
// is the default one; an explicit path's directory must already exist.
// The levels are opened (and the missing ones made) one by one from the
// root without following a link (statefile.OpenDir): each must belong to
// root or to the user running snapctl, or be sticky (as /tmp), and the
// state directory itself must be writable by no one else. A directory
// another user owns on the way (XDG_STATE_HOME or HOME pointing into it)
// is refused: that user could otherwise swap a level for a link and
// redirect where the counter is written, or make a second one. Each
// directory it creates is made durable in its parent (synced, top down)
// before the counter is created in it.
func (c *cli) prepareDefaultDir() error {
	if c.defaultDir == "" {
		return nil
	}
	dir, err := filepath.Abs(c.defaultDir)
	if err != nil {
		return err
	}
	var created []string // the directories OpenDir will make, deepest first
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	c.madeDirs = created
	var seam statefile.FS = statefile.OS{}
	if c.syncDir != nil {
		seam = syncSeam{sync: c.syncDir}
	}
	d, err := statefile.OpenDir(dir, statefile.DirOptions{
		Create: true,
		Perm:   0o700,
		Owners: []uint32{0, uint32(os.Geteuid())},
		FS:     seam,
	})
	if err != nil {
		return fmt.Errorf("state directory %s: %w; each directory on the way must belong to root or to %s (or be sticky, as /tmp), "+
			"with no symbolic link, and the last one writable only by its owner: set XDG_STATE_HOME or --counter to a directory of your own",
			dir, err, statefile.UserName(uint32(os.Geteuid())))
	}
	return d.Close()
}

// syncSeam makes OpenDir's syncs of the directories it creates go through
// the cli's syncDir (which tests replace).
type syncSeam struct {
	statefile.OS
	sync func(dir string) error
}

func (s syncSeam) SyncDir(dir string) error { return s.sync(dir) }

// unmakeDefaultDir removes the directories prepareDefaultDir made, if they
// are still empty: a refused command leaves nothing behind.
func (c *cli) unmakeDefaultDir() {
	for _, d := range c.madeDirs {
		if os.Remove(d) != nil {
			return
		}
	}
	c.madeDirs = nil
}
