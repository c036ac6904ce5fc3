package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// cmdNext prints N new ids, taken with one locked counter update.
func cmdNext(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("next")
	n := decimalFlag(fs, "n", 1, "how many ids to print")
	noRegistry := fs.Bool("no-registry", false, "issue from a registered counter without the registry (its reserved range does not bound what is issued)")
	var ff formFlags
	ff.add(fs)
	var rf registryFlags
	c.addRegistryFlags(&rf)
	c.addCreateFlags(&rf)
	if err := c.parse(args); err != nil {
		return err
	}
	if *n == 0 {
		return usageError{"-n must be at least 1"}
	}
	formOpts, err := ff.options(fs)
	if err != nil {
		return err
	}
	name, path, err := c.target()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	opts := append(c.options(), formOpts...)
	reg, err := c.nextRegistry(ctx, &rf, *noRegistry, path)
	if err != nil {
		return err
	}
	if reg != nil {
		defer reg.Close()
		opts = append(opts, engine.WithRegistry(reg))
	}
	if err := c.prepareDefaultDir(); err != nil {
		return err
	}
	g, err := engine.OpenContext(ctx, path, name, opts...)
	if err != nil {
		c.unmakeDefaultDir()
		return heldHere(ctx, orNil(reg), name, path, err)
	}
	ids, err := issueIDs(ctx, g, *n)
	if err != nil {
		g.Close()
		return err
	}
	if reg == nil {
		c.noticeNoRegistry(name, path)
	}
	if err := g.Close(); err != nil {
		// The ids are issued and durable; a failed close only leaves a
		// gap (the unused reservation was not returned).
		fmt.Fprintf(c.stderr, "snapctl: warning: %s\n", oneLine(err.Error()))
	}
	w := bufio.NewWriter(c.stdout)
	if _, err := w.Write(ids); err != nil {
		return err
	}
	return w.Flush()
}

// nextRegistry connects to the registry next issues with: none with
// --no-registry (noRegistry), which contradicts --cassandra. Without a
// registry configured, a registered counter at path (one with an owner
// token) is refused unless --no-registry is given.
func (c *cli) nextRegistry(ctx context.Context, rf *registryFlags, noRegistry bool, path string) (*cassandra.Registry, error) {
	if noRegistry && rf.cassandra != "" {
		return nil, usageError{"--no-registry and --cassandra contradict each other: give one"}
	}
	if noRegistry {
		// --no-registry beats SNAPID_CASSANDRA, which production hosts
		// export: it is the fallback during a registry outage.
		return nil, c.refuseWithoutRegistry("--no-registry turns it off: drop one of them")
	}
	reg, err := c.connect(ctx, rf, false)
	if err != nil {
		return nil, err
	}
	if reg != nil {
		return reg, nil
	}
	if err := c.refuseWithoutRegistry(noRegistryConfigured); err != nil {
		return nil, err
	}
	switch _, err := admin.OwnerToken(path); {
	case err == nil:
		return nil, usageError{fmt.Sprintf("%s is registered (it has an owner token): give --cassandra or SNAPID_CASSANDRA, or --no-registry to issue without the registry's bounds", path)}
	case !errors.Is(err, iofs.ErrNotExist):
		return nil, err // a damaged owner file: registered, and to be repaired first
	}
	return nil, nil
}

// noticeNoRegistry says, once, that name was taken without a registry
// and is unique on this host only, unless a registry proved it unique
// when the counter at path claimed it (it has an owner token: next
// --no-registry through an outage).
func (c *cli) noticeNoRegistry(name, path string) {
	if _, err := admin.OwnerToken(path); err == nil {
		return
	}
	fmt.Fprintf(c.stderr, "snapctl: notice: without a registry, %q is checked on this host only (another host may use it too); "+
		"set SNAPID_CASSANDRA or give --cassandra to check it across hosts\n", name)
}

// issueIDs issues n ids of g's form, one per line, with one counter
// update (all of them or none: at the form's bound it takes nothing).
func issueIDs(ctx context.Context, g *engine.Generator, n uint64) ([]byte, error) {
	var out []byte
	err := g.NextIDsContext(ctx, n, func(id engine.ID) { out = append(id.AppendTo(out), '\n') })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// lockTimeoutHelp describes --timeout of the commands that only wait for
// the counter's locks.
const lockTimeoutHelp = "time limit for waiting on the counter's lock, which another process may hold (positive)"

// cmdShow prints the last issued number and the path.
func cmdShow(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("show")
	asJSON := fs.Bool("json", false, jsonHelp)
	var timeout time.Duration
	timeLimitVar(fs, &timeout, "timeout", 30*time.Second, lockTimeoutHelp)
	if err := c.parse(args); err != nil {
		return err
	}
	path, err := c.resolveCounter()
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last, err := admin.ReadCounterContext(lctx, path)
	if err != nil {
		return err
	}
	mark, registered, err := admin.ReadMark(path)
	if err != nil {
		return err
	}
	var owner string
	var number uint64
	if registered {
		if tok, err := admin.OwnerToken(path); err == nil {
			owner = registry.OwnerID(tok)
		}
		if _, number, _, _, err = admin.ReadNodeNumber(path, c.options()...); err != nil {
			return err
		}
	}
	if *asJSON {
		out := struct {
			Path       string `json:"path"`
			LastIssued string `json:"last_issued"`
			Reserved   string `json:"cached_reserved_up_to,omitempty"`
			OwnerID    string `json:"owner_id,omitempty"`
			NodeNumber uint64 `json:"node_number,omitempty,string"`
		}{Path: path, LastIssued: strconv.FormatUint(last, 10), OwnerID: owner, NodeNumber: number}
		if registered {
			out.Reserved = strconv.FormatUint(mark, 10)
		}
		return json.NewEncoder(c.stdout).Encode(out)
	}
	if _, err := fmt.Fprintf(c.stdout, "last issued %d\t%s\n", last, path); err != nil {
		return err
	}
	if registered {
		// The mark as this host last cached it: the registry's may have
		// moved, or another host may hold the name now ('snapctl status'
		// reads the registry).
		_, err = fmt.Fprintf(c.stdout, "reserved up to %d, cached on this host (owner %s; 'snapctl status' reads the registry)\n", mark, owner)
	}
	if err == nil && number != 0 {
		_, err = fmt.Fprintf(c.stdout, "node number %d, as the registry gave it\n", number)
	}
	return err
}

// cmdInit creates or raises the counter, or with --force repairs it.
func cmdInit(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlags("init")
	var timeout time.Duration
	timeLimitVar(fs, &timeout, "timeout", 30*time.Second, lockTimeoutHelp)
	start := decimalFlag(fs, "start", 1, "the next number to issue")
	force := fs.Bool("force", false, "rewrite the counter whatever it holds (repairs a corrupt file; may lower it)")
	modeFlag := fs.String("mode", "", "permissions, in octal, of a counter file this creates (default 0600; the owner needs read and write)")
	ownerFlag := fs.String("owner", "", "give the counter file to user[:group] (names or numbers): the user the programs using it run as, when init runs as root")
	if err := c.parse(args); err != nil {
		return err
	}
	opts, err := initOptions(c.options(), *modeFlag, *ownerFlag)
	if err != nil {
		return err
	}
	startSet := false
	fs.Visit(func(f *flag.Flag) { startSet = startSet || f.Name == "start" })
	if *start == 0 {
		return usageError{"--start must be at least 1: the first number is 1"}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if *force && !startSet {
		return usageError{"--force needs an explicit --start N above every number this counter issued"}
	}
	path, err := c.resolveCounter()
	if err != nil {
		return err
	}
	if err := modeApplies(path, *modeFlag, *force); err != nil {
		return err
	}
	if err := c.prepareDefaultDir(); err != nil {
		return err
	}
	if *force {
		return c.repairCounter(ctx, path, *start, opts)
	}
	return c.initCounter(ctx, path, *start, opts)
}

// initOptions adds to opts the file mode (--mode, octal) and the owner
// (--owner user[:group]) of the counter init creates, when they are given.
func initOptions(opts []engine.Option, mode, owner string) ([]engine.Option, error) {
	if mode != "" {
		m, err := strconv.ParseUint(mode, 8, 32)
		if err != nil || m > 0o777 {
			return nil, usageError{fmt.Sprintf("--mode %q: want permissions in octal, such as 0600 or 0640", mode)}
		}
		opts = append(opts, engine.WithFileMode(iofs.FileMode(m)))
	}
	uid, gid, err := parseOwner(owner)
	if err != nil {
		return nil, err
	}
	if uid != -1 || gid != -1 {
		// Given on the descriptor Init or Repair checked and locked,
		// never by path (see engine.WithOwner).
		opts = append(opts, engine.WithOwner(uid, gid))
	}
	return opts, nil
}

// modeApplies refuses init's --mode (mode) where it would do nothing: it
// sets the permissions of a counter init creates, and --force rewrites an
// existing counter in place, as does init on a counter that exists.
func modeApplies(path, mode string, force bool) error {
	switch fi, err := os.Lstat(path); {
	case mode == "":
		return nil
	case force:
		return usageError{"--mode sets the permissions of a counter init creates, and --force rewrites an existing one in place: drop --mode (chmod changes a file's mode)"}
	case err == nil:
		return usageError{fmt.Sprintf("--mode sets the permissions of a counter init creates, and %s exists (mode %#o): drop --mode (chmod changes a file's mode)", path, uint32(fi.Mode().Perm()))}
	}
	return nil
}

// repairCounter rewrites the counter at path (init --force) so that start
// is the next number, and warns on stderr of what it held before.
func (c *cli) repairCounter(ctx context.Context, path string, start uint64, opts []engine.Option) error {
	prev, err := admin.RepairContext(ctx, path, start, opts...)
	if err != nil {
		return err
	}
	was := fmt.Sprintf("%d bytes % x", len(prev), prev)
	if v, err := admin.DecodeCounter(prev); err == nil {
		was = fmt.Sprintf("last issued %d", v)
	}
	fmt.Fprintf(c.stderr, "snapctl: WARNING: counter %s REWRITTEN by --force (was: %s); the next number is %d, and any number from %d up that was issued before will be issued again\n",
		path, was, start, start)
	return nil
}

// initCounter creates the counter at path, or raises it, so that the next
// number is at least start, and says what the next number is.
func (c *cli) initCounter(ctx context.Context, path string, start uint64, opts []engine.Option) error {
	before, err := admin.InitContext(ctx, path, start, opts...)
	if err != nil {
		return err
	}
	warnForeignOwner(c, path)
	if before < start-1 {
		fmt.Fprintf(c.stdout, "counter %s: next number %d (was %d)\n", path, start, before+1)
	} else {
		fmt.Fprintf(c.stdout, "counter %s: next number %d\n", path, start)
	}
	return nil
}

// parseOwner reads --owner user[:group]: names or numeric ids; a user
// name without a group gives the user's primary group. -1 leaves an id
// unchanged; "" changes neither. Changing the owner to another user needs
// root, checked here, before anything is created.
func parseOwner(s string) (uid, gid int, err error) {
	if s == "" {
		return -1, -1, nil
	}
	userPart, groupPart, hasGroup := strings.Cut(s, ":")
	uid, gid = -1, -1
	if userPart != "" {
		if uid, gid, err = ownerUser(s, userPart, hasGroup); err != nil {
			return 0, 0, err
		}
	}
	if groupPart != "" {
		if gid, err = ownerGroup(s, groupPart); err != nil {
			return 0, 0, err
		}
	}
	if uid == -1 && gid == -1 {
		return 0, 0, usageError{fmt.Sprintf("--owner %q: want user[:group]", s)}
	}
	if euid := os.Geteuid(); euid != 0 && uid != -1 && uid != euid {
		return 0, 0, usageError{fmt.Sprintf("--owner %q: giving the counter to another user needs root", s)}
	}
	return uid, gid, nil
}

// ownerUser reads the user part of --owner s: a numeric id, or a name,
// whose primary group it also returns when s has no group (else gid is
// -1).
func ownerUser(s, userPart string, hasGroup bool) (uid, gid int, err error) {
	n, ok, err := parseNumericID(userPart)
	if err != nil {
		return 0, 0, badOwner(s, "user id", err)
	}
	if ok {
		return n, -1, nil
	}
	u, err := user.Lookup(userPart)
	if err != nil {
		return 0, 0, badOwner(s, "no such user", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid = -1
	if !hasGroup {
		gid, _ = strconv.Atoi(u.Gid)
	}
	return uid, gid, nil
}

// ownerGroup reads the group part of --owner s: a numeric id or a name.
func ownerGroup(s, groupPart string) (int, error) {
	n, ok, err := parseNumericID(groupPart)
	if err != nil {
		return 0, badOwner(s, "group id", err)
	}
	if ok {
		return n, nil
	}
	g, err := user.LookupGroup(groupPart)
	if err != nil {
		return 0, badOwner(s, "no such group", err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	return gid, nil
}

// badOwner is the usage error of --owner s whose part what is wrong.
func badOwner(s, what string, err error) error {
	return usageError{fmt.Sprintf("--owner %q: %s: %v", s, what, err)}
}

// maxID is the largest user or group id: 2^32-1 means "unchanged" to
// chown, so it names no one.
const maxID = 1<<32 - 2

// parseNumericID reads a user or group id given as a number: decimal
// digits only (no sign, no leading zero), at most maxID. ok is false for
// a name (anything that does not start with a digit, a sign or a space).
func parseNumericID(s string) (id int, ok bool, err error) {
	if s == "" || !strings.ContainsRune("0123456789+- \t", rune(s[0])) {
		return 0, false, nil
	}
	v, err := parseDecimal(s)
	if err != nil {
		return 0, true, err
	}
	if v > maxID {
		return 0, true, fmt.Errorf("%d is out of range: the largest id is %d", v, uint64(maxID))
	}
	return int(v), true, nil
}

// warnForeignOwner warns when the counter's owner differs from its
// directory's (root made it in a service's directory without --owner): the
// programs running as the directory's owner could not open it.
func warnForeignOwner(c *cli, path string) {
	fi, err1 := os.Stat(path)
	di, err2 := os.Stat(filepath.Dir(path))
	if err1 != nil || err2 != nil {
		return
	}
	fu, du := fi.Sys().(*syscall.Stat_t).Uid, di.Sys().(*syscall.Stat_t).Uid
	if fu != du {
		fmt.Fprintf(c.stderr, "snapctl: warning: the counter %s belongs to uid %d but its directory to uid %d: "+
			"if the programs using it run as uid %d, give it to them with 'snapctl init --owner %d' (it is mode %s)\n",
			path, fu, du, du, du, fi.Mode().Perm())
	}
}

func cmdVersion(_ context.Context, c *cli, args []string) error {
	c.newFlags("version")
	if err := c.parse(args); err != nil {
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "snapctl %s\n", version())
	return err
}

func cmdHelp(ctx context.Context, c *cli, args []string) error {
	if helpAsked(args) { // snapctl help --help
		printUsage(c.stdout)
		return nil
	}
	if len(args) == 2 && args[0] == "seq" {
		return cmdSeq(ctx, c, []string{args[1], "-h"}) // help seq SUBCOMMAND
	}
	if len(args) > 1 {
		return usageError{fmt.Sprintf("unexpected argument %q", args[1])}
	}
	if len(args) == 1 {
		cmd := lookup(args[0])
		if cmd == nil {
			return usageError{fmt.Sprintf("unknown command %q", args[0])}
		}
		if cmd.name == "help" {
			printUsage(c.stdout)
			return nil
		}
		fmt.Fprintf(c.stdout, "%s\n\n", cmd.summary)
		// Each command defines its flags as it parses them: -h makes it
		// print its usage and flags and stop.
		return cmd.run(ctx, c, []string{"-h"})
	}
	printUsage(c.stdout)
	return nil
}

// heldHere gives a refused claim (ErrNameTaken) whose holder is this very
// machine, under another counter file, the hint that fits: use that
// counter (--counter, SNAPID_COUNTER), never a forced take-over of one's
// own name; if that counter is gone, a forced release first. Any other error, or a holder elsewhere, is returned as it is.
func heldHere(ctx context.Context, reg registry.Registry, name, path string, err error) error {
	if reg == nil || !errors.Is(err, engine.ErrNameTaken) {
		return err
	}
	h, gerr := reg.Get(ctx, name)
	local := engine.LocalHostInfo()
	if gerr != nil || h.State != registry.StateActive || h.MachineID == "" || h.MachineID != local.MachineID {
		return err
	}
	return hintError{err, fmt.Sprintf("the holder is this very machine, with another counter file (owner %s) than %s: "+
		"point --counter (or SNAPID_COUNTER) at the counter that holds %q; do not take over your own name with --force; "+
		"if that counter is gone (removed), release the name first with 'snapctl release --force --start N', N above every "+
		"number it issued (its RESERVED UP TO in 'snapctl names'), then claim it again",
		registry.OwnerID(h.Owner), path, name)}
}
