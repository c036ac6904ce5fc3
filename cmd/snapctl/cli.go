package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/gocql/gocql"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/cassandra"
)

// Exit statuses.
const (
	exitOK       = 0 // success
	exitProblems = 1 // check-names found problems
	exitFailure  = 2 // anything that could not be done
)

// command is one snapctl command.
type command struct {
	name    string
	usage   string // arguments, after the command name
	summary string
	run     func(ctx context.Context, c *cli, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"next", "[-n N]", "print N new ids (default 1), one per line", cmdNext},
		{"show", "[--json]", "print the counter's last issued number and the file's path (and the mark cached on this host)", cmdShow},
		{"init", "[--start N] [--force] [--mode 0600] [--owner user[:group]]", "create the counter so the next number is N (default 1); --force repairs a corrupt file", cmdInit},
		{"register", "[--force --start N]", "claim the node name in the registry (--force takes it from an active holder known to be gone)", cmdRegister},
		{"release", "[--force --start N]", "release the node name in the registry (--force: on behalf of a holder that is gone)", cmdRelease},
		{"setup", "--replication dc1:3,dc2:3|N", "create the registry's keyspace and tables once, with the replication given (production clusters)", cmdSetup},
		{"status", "[--json]", "look at this host: the counter, the files beside it, the processes using it, the registry's row (exit 1 if anything needs attention)", cmdStatus},
		{"names", "[--json]", "list the registry's rows: name, holder's host, state, last seen, mark", cmdNames},
		{"check-names", "[--stale D] [--clock-skew D] [--names FILE] [--json]", "audit the registry, its keyspace's replication, its sequences and an inventory of planned names (exit 1 if problems)", cmdCheckNames},
		{"seq", "create|next|show NAME [flags]", "integer sequences: create one, print new numbers, show its ranges ('snapctl help seq')", cmdSeq},
		{"version", "", "print the version", cmdVersion},
		{"help", "[command]", "show help", cmdHelp},
	}
}

// cli carries one invocation's environment and resolved settings.
type cli struct {
	env
	fs *flag.FlagSet

	name       string
	counter    string
	sync       bool
	defaultDir string   // set when counter is the per-user default
	madeDirs   []string // the directories prepareDefaultDir made, deepest first
}

// usageError is a mistake on the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// run executes snapctl with args (without the program name) and returns
// the exit status.
func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprintln(e.stderr, "snapctl: no command given; run 'snapctl help' for the list of commands")
		return exitFailure
	}
	args, err := commandFirst(args)
	if err != nil {
		fmt.Fprintf(e.stderr, "snapctl: %s; run 'snapctl help' for the list of commands and flags\n", oneLine(err.Error()))
		return exitFailure
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(e.stderr, "snapctl: unknown command %q; run 'snapctl help' for the list\n", name)
		return exitFailure
	}
	c := &cli{env: e}
	err = cmd.run(ctx, c, args[1:])
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errProblems):
		return exitProblems
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	}
	fmt.Fprintf(e.stderr, "snapctl: %s\n", oneLine(describe(cmd.name, err)))
	return exitFailure
}

// errProblems reports that a check found problems (exit status 1); the
// command has already printed them.
var errProblems = errors.New("problems found")

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// boolFlags are the flags that take no value ("--json", not "--json x"),
// for commandFirst.
var boolFlags = map[string]bool{"sync": true, "json": true, "force": true, "no-registry": true,
	"allow-fragile-replication": true, "h": true, "help": true, "version": true}

// commandFirst moves flags given before the command ("snapctl --name web
// next") after it, where the command's own flags parse them.
func commandFirst(args []string) ([]string, error) {
	var lead []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || len(a) == 1 {
			break
		}
		switch name := strings.TrimLeft(a, "-"); {
		case name == "h" || name == "help" || name == "version":
			if len(lead) == 0 {
				return args, nil // snapctl --help, snapctl --version
			}
		case strings.Contains(name, "=") || boolFlags[name]:
		case i+1 < len(args):
			lead = append(lead, a)
			i++
			a = args[i]
		default:
			return nil, fmt.Errorf("flag %s needs a value and a command after it", a)
		}
		lead = append(lead, a)
	}
	if len(lead) == 0 {
		return args, nil
	}
	if len(lead) == len(args) {
		return nil, fmt.Errorf("no command given after the flags %s", strings.Join(lead, " "))
	}
	// The flags go after the command and the words that must come first
	// ("seq next NAME").
	at := len(lead) + 1
	for n := 0; n < leadingWords[args[len(lead)]] && at < len(args) && !strings.HasPrefix(args[at], "-"); n++ {
		at++
	}
	out := append([]string{}, args[len(lead):at]...)
	out = append(out, lead...)
	return append(out, args[at:]...), nil
}

// leadingWords says how many words follow a command before its flags.
var leadingWords = map[string]int{"seq": 2}

// Common flags, for newFlags.
const (
	flagName = 1 << iota
	flagCounter
	flagSync
	flagsAll = flagName | flagCounter | flagSync
)

// commonFlags lists the common flags of the commands that do not use all
// three: a flag that would do nothing is refused, not ignored.
var commonFlags = map[string]int{
	"show":        flagCounter,
	"init":        flagCounter | flagSync,
	"release":     flagName | flagCounter,
	"setup":       0,
	"check-names": flagName | flagCounter,
	"status":      flagName | flagCounter,
	"names":       0,
	"version":     0,
}

// newFlags returns the flag set of a command with the common flags it
// uses (all three unless commonFlags says otherwise).
func (c *cli) newFlags(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet("snapctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	which, ok := commonFlags[cmd]
	if !ok {
		which = flagsAll
	}
	c.sync = true
	if which&flagName != 0 {
		fs.StringVar(&c.name, "name", "", "node name (default $SNAPID_NAME, else derived from the host name)")
	}
	if which&flagCounter != 0 {
		fs.StringVar(&c.counter, "counter", "", "counter file (default $SNAPID_COUNTER, else the per-user state file)")
	}
	if which&flagSync != 0 {
		fs.BoolVar(&c.sync, "sync", true, "fdatasync every counter update")
	}
	c.fs = fs
	return fs
}

// parse parses args and refuses positional arguments.
func (c *cli) parse(args []string) error {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.fs.SetOutput(c.stdout)
			fmt.Fprintf(c.stdout, "usage: %s %s\n\nflags:\n", c.fs.Name(), lookup(strings.TrimPrefix(c.fs.Name(), "snapctl ")).usage)
			c.fs.PrintDefaults()
			return err
		}
		return usageError{err.Error()}
	}
	if c.fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", c.fs.Arg(0))}
	}
	return nil
}

// resolveName returns the node name: --name, then $SNAPID_NAME, then the
// host name made into a name as Snap! does, with a notice on stderr.
func (c *cli) resolveName() (string, error) {
	name := c.name
	if name == "" {
		name = c.getenv("SNAPID_NAME")
	}
	if name != "" {
		return name, snapid.ValidateName(name)
	}
	host, err := c.hostname()
	if err != nil {
		return "", fmt.Errorf("no --name or SNAPID_NAME, and the host name is unknown: %w", err)
	}
	name, changed, err := snapid.NameFromHostname(host)
	if err != nil {
		return "", fmt.Errorf("no --name or SNAPID_NAME, and %w", err)
	}
	notice := fmt.Sprintf("node name %q from the host name", name)
	if changed != "" {
		notice = fmt.Sprintf("node name %q (%s)", name, changed)
	}
	fmt.Fprintf(c.stderr, "snapctl: notice: no --name or SNAPID_NAME; using %s\n", notice)
	return name, nil
}

// resolveCounter returns the counter path: --counter, then
// $SNAPID_COUNTER, then the per-user default.
func (c *cli) resolveCounter() (string, error) {
	if c.counter != "" {
		return c.counter, nil
	}
	if p := c.getenv("SNAPID_COUNTER"); p != "" {
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

// prepareDefaultDir creates the per-user state directory when the counter
// is the default one; an explicit path's directory must already exist.
// Each directory it creates is made durable in its parent (synced, top
// down) before the counter is created in it.
func (c *cli) prepareDefaultDir() error {
	if c.defaultDir == "" {
		return nil
	}
	var created []string // the directories MkdirAll will make, deepest first
	for d := filepath.Clean(c.defaultDir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(c.defaultDir, 0o700); err != nil {
		return err
	}
	c.madeDirs = created
	sync := c.syncDir
	if sync == nil {
		sync = syncDir
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := sync(filepath.Dir(created[i])); err != nil {
			return fmt.Errorf("creating %s: sync directory %s: %w", created[i], filepath.Dir(created[i]), err)
		}
	}
	return nil
}

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

func (c *cli) options() []snapid.Option {
	opts := []snapid.Option{snapid.WithSync(c.sync)}
	if d := c.getenv("SNAPID_BINDING_DIR"); d != "" {
		// The library reads the variable too; this makes a test's
		// environment (not only the process's) count.
		opts = append(opts, snapid.WithBindingDir(d))
	}
	return opts
}

// describe turns an error into the one-line message, with what to do.
func describe(cmd string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "snapid: ")
	var hint string
	var ue usageError
	var he hintError
	switch {
	case errors.As(err, &ue) && cmd == "help":
		hint = "run 'snapctl help' for the list of commands"
	case errors.As(err, &ue):
		hint = fmt.Sprintf("run 'snapctl help %s'", cmd)
	case errors.As(err, &he):
		hint = he.hint
	case errors.Is(err, snapid.ErrInvalidName):
		hint = "set a valid name with --name or SNAPID_NAME"
	case errors.Is(err, snapid.ErrCorruptLease):
		hint = fmt.Sprintf("nothing was changed; stop the programs of this host using the sequence, then remove %s: the next start takes a new lease "+
			"(the old lease's unused numbers are skipped, never issued again)", errPath(err, "the .seq. lease file"))
	case errors.Is(err, snapid.ErrNoSequence):
		hint = "create it first with 'snapctl seq create NAME [--start N] [--max N]'"
	case errors.Is(err, snapid.ErrInvalidSequence):
		hint = "nothing was changed; --start is at least 1 (raised only before the sequence handed out a number), --max at least --start, " +
			"at most 9223372036854775807, and never below numbers already handed out"
	case errors.Is(err, snapid.ErrSequencesUnsupported):
		hint = "sequences need a registry that keeps them (Cassandra: --cassandra or SNAPID_CASSANDRA)"
	case errors.Is(err, snapid.ErrExhausted) && cmd == "seq":
		hint = seqExhaustedHint(err)
	case errors.Is(err, snapid.ErrCorruptMark):
		hint = fmt.Sprintf("nothing was changed; stop the programs using this counter, then remove %s: the next start with the registry "+
			"rebuilds it from the registry's mark (raising the counter to that mark)", errPath(err, "the .mark file"))
	case errors.Is(err, snapid.ErrCorruptOwner):
		hint = fmt.Sprintf("nothing was changed; restore %s from a backup of this host; if it is lost, stop the programs using this counter, "+
			"remove it, and claim the name again with 'snapctl register' (a new token; add --force --start N above the last id issued "+
			"if the registry still holds the name for the old one)", errPath(err, "the .owner file"))
	case errors.Is(err, snapid.ErrCorruptSession):
		hint = fmt.Sprintf("nothing was changed; other processes of this host use the counter with a session file this one cannot use "+
			"(an earlier version of snapid?): stop them all, then start again (the first one rewrites %s)", errPath(err, "the .session file"))
	case errors.Is(err, snapid.ErrNameMismatch):
		hint = "nothing was changed; one counter file serves one node name: give --name the name it is in use under, or use another --counter"
	case errors.Is(err, snapid.ErrNameBound):
		hint = "nothing was issued (give that counter with --counter or SNAPID_COUNTER, or another --name)"
	case errors.Is(err, snapid.ErrCorruptBinding):
		hint = "nothing was issued"
	case errors.Is(err, snapid.ErrCorrupt):
		hint = "nothing was changed; find the last id this host issued, then run 'snapctl init --force --start N' with N above it"
	case errors.Is(err, snapid.ErrLowered):
		hint = "nothing was changed; the counter is never lowered except by 'snapctl init --force --start N'"
	case errors.Is(err, snapid.ErrSymlink):
		hint = "point --counter at the real file, or remove the link"
	case errors.Is(err, snapid.ErrNotRegular):
		hint = "point --counter at a file, not a directory"
	case errors.Is(err, snapid.ErrReleased):
		hint = "nothing was issued; this host gave the name up with 'snapctl release': run 'snapctl register' to claim it again on purpose"
	case errors.Is(err, snapid.ErrNameTaken):
		hint = "choose another --name, or, if that holder is gone for good, 'snapctl release --force --start N' or 'snapctl register --force --start N'"
	case errors.Is(err, snapid.ErrProbableClone):
		hint = "this counter directory looks copied from a machine still using it: give this machine its own counter (remove the .owner file) and name"
	case errors.Is(err, snapid.ErrExhausted):
		hint = "nothing was issued: the counter never passes 2^64-1; ask for fewer numbers, or use a new node name once it is used up"
	case errors.Is(err, cassandra.ErrFragileReplication):
		hint = "check --replication (SNAPID_REPLICATION); nothing was created"
	case errors.Is(err, cassandra.ErrLocalSerial):
		hint = "drop --serial-consistency (SNAPID_SERIAL_CONSISTENCY) or set it to serial"
	case errors.Is(err, snapid.ErrReservationExhausted): // before ErrRegistry, which it may wrap
		hint = "the registry did not extend this host's reserved range: " + registryHint(err) + "; ids flow again once it does"
	case errors.Is(err, snapid.ErrRegistry) && readOnly[cmd]:
		hint = registryHint(err)
	case errors.Is(err, snapid.ErrRegistry):
		hint = registryHint(err) + "; nothing was issued"
	case errors.Is(err, snapid.ErrReplaced):
		hint = "the counter file was removed or replaced while in use; check it, then start again"
	case errors.Is(err, snapid.ErrInUse):
		hint = "stop the programs using this counter first"
	case errors.Is(err, fs.ErrNotExist) && (cmd == "init" || cmd == "next" || cmd == "register"):
		hint = "check --counter; its directory must exist: create it, owned by the user the programs using the counter run as"
	case errors.Is(err, fs.ErrNotExist):
		hint = "check --counter (its directory must exist), or run 'snapctl init'"
	case errors.Is(err, fs.ErrPermission):
		hint = "check the permissions of the counter file and its directory"
	}
	if hint != "" {
		return msg + "; " + hint
	}
	return msg
}

// readOnly are the commands that change nothing, anywhere.
var readOnly = map[string]bool{"show": true, "check-names": true, "status": true, "names": true}

// hintError is an error that carries its own hint.
type hintError struct {
	err  error
	hint string
}

func (e hintError) Error() string { return e.err.Error() }
func (e hintError) Unwrap() error { return e.err }

// errPath returns the path of the file err is about, or def.
func errPath(err error, def string) string {
	var fe *snapid.FileError
	if errors.As(err, &fe) && fe.Path != "" {
		return fe.Path
	}
	return def
}

// registryHint says what to check for a registry error. A statement the
// server refused keeps its error code; a failed connection keeps only the
// driver's text, so the text of the innermost errors (never the outer
// messages, which hold user-given hosts and keyspace names) tells
// authentication, permission, TLS and a missing table apart.
func registryHint(err error) string {
	const (
		credentials = "check the user name (--username / SNAPID_CASSANDRA_USERNAME) and the password (SNAPID_CASSANDRA_PASSWORD)"
		permissions = "the Cassandra role needs SELECT and MODIFY on the registry keyspace (and, to make the registry the first time, CREATE on ALL KEYSPACES, or have an administrator make it)"
	)
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeCredentials:
			return credentials
		case gocql.ErrCodeUnauthorized:
			return permissions
		case gocql.ErrCodeConfig:
			return "check --replication (SNAPID_REPLICATION): its data-centre names must be the cluster's (see 'nodetool status')"
		}
	}
	m := strings.ToLower(strings.Join(leafMessages(err), "; "))
	switch {
	case strings.Contains(m, "authentication") || strings.Contains(m, "password are incorrect"):
		return credentials
	case strings.Contains(m, "permission"):
		return permissions
	case strings.Contains(m, "tls:") || strings.Contains(m, "x509:"):
		return "check --tls-ca, --tls-cert and --tls-key (SNAPID_CASSANDRA_TLS_*) against the cluster's certificates"
	case strings.Contains(strings.ToLower(err.Error()), "does not exist"):
		return "check --keyspace (SNAPID_KEYSPACE); the registry is made by 'snapctl setup' (or, with no set-up, by the first 'snapctl register' or program that claims a name)"
	}
	return "check that Cassandra is reachable (--cassandra / SNAPID_CASSANDRA) and try again"
}

// leafMessages returns the messages of the innermost errors of err's tree.
func leafMessages(err error) []string {
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return leafMessages(inner)
		}
	case interface{ Unwrap() []error }:
		var out []string
		for _, e := range u.Unwrap() {
			out = append(out, leafMessages(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: snapctl <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	width := 0
	for _, cmd := range commands {
		width = max(width, len(cmd.name))
	}
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, cmd.name, cmd.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "common flags: --name, --counter, --sync (default true)")
	fmt.Fprintln(w, "registry flags: --cassandra host[:port],…, --keyspace, --username, --tls-ca, --tls-cert, --tls-key, --timeout,")
	fmt.Fprintln(w, "  --local-dc DC, --consistency quorum|local_quorum|each_quorum, --serial-consistency serial")
	fmt.Fprintln(w, "  (local_serial is refused: two data centres cut apart could both win one name)")
	fmt.Fprintln(w, "creating the keyspace (setup, and next/register/release when it is missing): --replication dc1:3,dc2:3|N,")
	fmt.Fprintln(w, "  --allow-fragile-replication (a cluster of several nodes refuses a replication that cannot lose a node)")
	fmt.Fprintln(w, "environment: SNAPID_NAME, SNAPID_COUNTER, XDG_STATE_HOME, SNAPID_CASSANDRA, SNAPID_KEYSPACE,")
	fmt.Fprintln(w, "  SNAPID_CASSANDRA_USERNAME, SNAPID_CASSANDRA_PASSWORD, SNAPID_CASSANDRA_TLS_CA, _TLS_CERT, _TLS_KEY,")
	fmt.Fprintln(w, "  SNAPID_LOCAL_DC, SNAPID_CONSISTENCY, SNAPID_SERIAL_CONSISTENCY, SNAPID_REPLICATION, SNAPID_BINDING_DIR")
	fmt.Fprintln(w, "production (two data centres of 3 nodes, on a host of dc1):")
	fmt.Fprintln(w, "  snapctl setup --cassandra db1,db2,db3 --local-dc dc1 --replication dc1:3,dc2:3   (once)")
	fmt.Fprintln(w, "  SNAPID_CASSANDRA=db1,db2,db3 SNAPID_LOCAL_DC=dc1 snapctl register")
	fmt.Fprintln(w, "exit status: 0 success, 1 check-names found problems or status needs attention, 2 could not be done")
}

// version describes the build: the module's version and the VCS
// revision it was built from, from the build information.
func version() string {
	info, ok := debug.ReadBuildInfo()
	return versionOf(info, ok)
}

func versionOf(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "unknown (no build information)"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var parts []string
	switch {
	case rev != "":
		r := "revision " + rev
		if at != "" {
			r += " of " + at
		}
		if modified {
			r += ", with local changes"
		}
		parts = append(parts, r)
	case v == "(devel)":
		parts = append(parts, "no VCS revision: built with -buildvcs=false or outside a repository")
	}
	if info.GoVersion != "" {
		parts = append(parts, info.GoVersion)
	}
	if len(parts) == 0 {
		return v
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}
