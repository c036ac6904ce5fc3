package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
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
		{"next", "[-n N] [--format name|decimal|striped] [--node-number N] [--stride S] [--max-id N | --max-safe-integer | --uint32]", "print N new ids (default 1), one per line", cmdNext},
		{"show", "[--json] [--timeout 30s]", "print the counter's last issued number and the file's path (and the mark cached on this host)", cmdShow},
		{"init", "[--start N] [--force] [--mode 0600] [--owner user[:group]] [--timeout 30s]", "create the counter so the next number is N (default 1); --force repairs a corrupt file", cmdInit},
		{"register", "[--force --start N]", "claim the node name in the registry (--force takes it from an active holder known to be gone)", cmdRegister},
		{"release", "[--force --start N]", "release the node name in the registry (--force: on behalf of a holder that is gone)", cmdRelease},
		{"setup", "--replication dc1:3,dc2:3|N [--stride S]", "create the registry's keyspace and tables once, with the replication given (production clusters), and record the stride of striped ids", cmdSetup},
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
	e.stderr = &lockedWriter{w: e.stderr}
	if e.environ != nil {
		// Once per run: a misspelt variable is never read, and one
		// naming the registry leaves the host without it.
		cassandra.WarnUnknownEnv(slog.New(newLineHandler(e.stderr)), e.environ())
	}
	if len(args) == 0 {
		io.WriteString(e.stderr, formatMessage("no command given", "run 'snapctl help' for the list of commands"))
		return exitFailure
	}
	args, err := commandFirst(args)
	if err != nil {
		io.WriteString(e.stderr, formatMessage(err.Error(), "run 'snapctl help' for the list of commands and flags"))
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
		io.WriteString(e.stderr, formatMessage(fmt.Sprintf("unknown command %q", name), "run 'snapctl help' for the list"))
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
	io.WriteString(e.stderr, formatError(cmd.name, err))
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
	"allow-fragile-replication": true, "max-safe-integer": true, "uint32": true, "h": true, "help": true, "version": true}

// positionals takes the first n words that are not flags (nor flags'
// values) out of args, wherever they stand among the flags ("seq create
// --keyspace k s1" as "seq create s1 --keyspace k"), and returns them and
// the rest, in order. After "--" every word is a word.
func positionals(args []string, n int) (words, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case len(words) == n:
			rest = append(rest, a)
		case a == "--":
			for _, w := range args[i+1:] {
				if len(words) < n {
					words = append(words, w)
				} else {
					rest = append(rest, w)
				}
			}
			return words, rest
		case strings.HasPrefix(a, "-") && len(a) > 1:
			rest = append(rest, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && !boolFlags[name] && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
		default:
			words = append(words, a)
		}
	}
	return words, rest
}

// helpAsked reports whether args ask for help (-h, -help, --help).
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

// commandFirst moves flags given before the command ("snapctl --name web
// next") after it, where the command's own flags parse them.
func commandFirst(args []string) ([]string, error) {
	lead, err := leadingFlags(args)
	if err != nil {
		return nil, err
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

// leadingFlags returns the flags, with their values, that args give
// before the command: none for "snapctl --help" and "snapctl --version".
// A flag that takes a value and has nothing after it is an error.
func leadingFlags(args []string) ([]string, error) {
	var lead []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || len(a) == 1 {
			break
		}
		switch name := strings.TrimLeft(a, "-"); {
		case name == "h" || name == "help" || name == "version":
			if len(lead) == 0 {
				return nil, nil // snapctl --help, snapctl --version
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
	return lead, nil
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
	"init":        flagCounter, // init and init --force always sync
	"release":     flagName | flagCounter,
	"setup":       0,
	"check-names": flagName | flagCounter,
	"status":      flagName | flagCounter,
	"names":       0,
	"version":     0,
	"seq create":  flagCounter, // this host's lease, printed after
	"seq show":    flagCounter, // this host's lease file
}

// newFlags returns the flag set of a command ("seq create" for a
// subcommand) with the common flags it uses (all three unless
// commonFlags says otherwise).
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
			fmt.Fprintf(c.stdout, "usage: %s\n", usageLine(strings.TrimPrefix(c.fs.Name(), "snapctl ")))
			hasFlags := false
			c.fs.VisitAll(func(*flag.Flag) { hasFlags = true })
			if hasFlags {
				fmt.Fprintf(c.stdout, "\nflags:\n")
				printFlags(c.stdout, c.fs)
			}
			printExamples(c.stdout, strings.TrimPrefix(c.fs.Name(), "snapctl "))
			return err
		}
		return usageError{flagError(c.fs, err)}
	}
	if c.fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", c.fs.Arg(0))}
	}
	return nil
}

// usageLine is the usage of the command name ("seq create" for a
// subcommand): "snapctl next [-n N] …".
func usageLine(name string) string {
	if sub, ok := strings.CutPrefix(name, "seq "); ok {
		for _, sc := range seqSubcommands {
			if sc.name == sub {
				return "snapctl seq " + sc.name + " " + sc.usage
			}
		}
	}
	return strings.TrimSpace("snapctl " + name + " " + lookup(name).usage)
}

// flagForm is how snapctl writes a flag: -n (one letter), --name.
func flagForm(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// printFlags lists fs's flags as the documentation writes them
// ("--name string"), with their usage and default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		switch g, ok := f.Value.(flag.Getter); {
		case ok && isDuration(g.Get()): // --timeout
			kind = "duration"
		case kind == "value": // the decimal flags (-n, --start, --max-id…)
			kind = "N"
		}
		line := "  " + flagForm(f.Name)
		if kind != "" {
			line += " " + kind
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}

// flagErrorRE matches the flag package's refusal of a value.
var flagErrorRE = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): (.*)$`)

// flagError rewrites the flag package's errors in snapctl's words: flags
// as --flag, and a duration that is not one (--stale 10) with what is
// wanted.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Sprintf("%s has no flag %s", strings.TrimPrefix(fs.Name(), "snapctl "), flagForm(name))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("flag %s needs a value", flagForm(name))
	}
	m := flagErrorRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name, why := m[1], m[2], m[3]
	if f := fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok && isDuration(g.Get()) {
			if why == errNotPositive.Error() {
				return fmt.Sprintf("%s %q: want a positive time limit, such as 30s or 2m (0 or less would end the command's work before it starts)", flagForm(name), value)
			}
			return fmt.Sprintf("%s %q: want a duration with its unit, such as 10m, 90s or 1h30m", flagForm(name), value)
		}
	}
	return fmt.Sprintf("%s %q: %s", flagForm(name), value, why)
}

// isDuration reports whether a flag's value v is a duration.
func isDuration(v any) bool {
	_, ok := v.(time.Duration)
	return ok
}

func (c *cli) options() []engine.Option {
	// The library's warnings (a counter raised, a binding moved, a
	// background extension failing) go to stderr, one line each.
	opts := []engine.Option{engine.WithSync(c.sync), c.logOption()}
	if d := c.getenv("SNAPID_BINDING_DIR"); d != "" {
		// The library reads the variable too; this makes a test's
		// environment (not only the process's) count.
		opts = append(opts, engine.WithBindingDir(d))
	}
	return opts
}

// logOption sends the library's notices to stderr, one line each
// ("snapctl: warning: …").
func (c *cli) logOption() engine.Option {
	return engine.WithLogger(slog.New(newLineHandler(c.stderr)))
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
	fmt.Fprintln(w, "common flags: --name, --counter, --sync (default true) on next, register and seq next; show, init,")
	fmt.Fprintln(w, "  seq create and seq show take --counter, release, status and check-names --name and --counter")
	fmt.Fprintln(w, "  ('snapctl help CMD' lists all; a flag that would do nothing is refused)")
	fmt.Fprintln(w, "registry flags (next, register, release, setup, status, names, check-names, seq; next --no-registry skips it):")
	fmt.Fprintln(w, "  --cassandra host[:port],…, --keyspace, --username, --tls-ca, --tls-cert, --tls-key, --timeout (default 30s),")
	fmt.Fprintln(w, "  --local-dc DC, --consistency quorum|local_quorum|each_quorum, --serial-consistency serial")
	fmt.Fprintln(w, "  (local_serial is refused: two data centres cut apart could both win one name)")
	fmt.Fprintln(w, "creating the keyspace (setup; next/register/release create only the default one, snapid, when it is missing):")
	fmt.Fprintln(w, "  --replication dc1:3,dc2:3|N, --allow-fragile-replication (a cluster of several nodes refuses a replication")
	fmt.Fprintln(w, "  that cannot lose a node); a flag beats its variable, even empty (--cassandra '' is no registry)")
	fmt.Fprintln(w, "environment: SNAPID_NAME, SNAPID_COUNTER, XDG_STATE_HOME, SNAPID_CASSANDRA, SNAPID_KEYSPACE,")
	fmt.Fprintln(w, "  SNAPID_CASSANDRA_USERNAME, SNAPID_CASSANDRA_PASSWORD, SNAPID_CASSANDRA_TLS_CA, _TLS_CERT, _TLS_KEY,")
	fmt.Fprintln(w, "  SNAPID_LOCAL_DC, SNAPID_CONSISTENCY, SNAPID_SERIAL_CONSISTENCY, SNAPID_REPLICATION, SNAPID_BINDING_DIR")
	fmt.Fprintln(w, "production (two data centres of 3 nodes, on a host of dc1):")
	fmt.Fprintln(w, "  snapctl setup --cassandra db1,db2,db3 --local-dc dc1 --replication dc1:3,dc2:3   (once)")
	fmt.Fprintln(w, "  SNAPID_CASSANDRA=db1,db2,db3 SNAPID_LOCAL_DC=dc1 snapctl register")
	fmt.Fprintln(w, "exit status: 0 success, 1 check-names found problems or status needs attention, 2 could not be done")
	printExamples(w, "help")
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
