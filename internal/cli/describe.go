package cli

// Error messages: what went wrong, and what to do.

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"unicode/utf8"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// describe turns an error into one line: the message, then what to do.
func describe(cmd string, err error) string {
	msg, hint := describeParts(cmd, err)
	if hint == "" {
		return msg
	}
	return msg + "; " + hint
}

// describeParts returns err's message and what to do about it ("" if
// nothing), for command cmd.
func describeParts(cmd string, err error) (msg, hint string) {
	msg = strings.TrimPrefix(err.Error(), "snapid: ")
	hint = hintFor(cmd, err)
	if hint == "" {
		return msg, ""
	}
	// A message that already says so does not say it twice.
	for _, said := range []string{"nothing was changed", "nothing was issued", "nothing was created"} {
		if strings.Contains(msg, said) {
			hint = strings.TrimPrefix(strings.TrimPrefix(hint, said+"; "), said+": ")
			if hint == said {
				return msg, ""
			}
		}
	}
	return msg, hint
}

// errorWidth is the widest line of an error snapctl prints: longer ones
// are wrapped at blanks (a single longer word, such as a long path, stays
// whole).
const errorWidth = 100

// formatError is err from command cmd as snapctl prints it on stderr: the
// error's message first ("snapctl: …", wrapped, its further lines
// indented by four), then what to do, one piece of advice a line ("  - …").
// The error itself is left as the library returned it.
func formatError(cmd string, err error) string {
	return formatMessage(describeParts(cmd, err))
}

// formatMessage is formatError's layout of an error's message and its
// hint.
func formatMessage(msg, hint string) string {
	var b strings.Builder
	wrapInto(&b, "snapctl: ", "    ", msg)
	for _, h := range splitAdvice(hint) {
		wrapInto(&b, "  - ", "    ", h)
	}
	return b.String()
}

// wrapInto writes text's words to b in lines of at most errorWidth
// characters, the first starting with first, the others with rest.
func wrapInto(b *strings.Builder, first, rest, text string) {
	line, words := first, 0
	for _, w := range strings.Fields(text) {
		if words > 0 && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > errorWidth {
			b.WriteString(line + "\n")
			line, words = rest, 0
		}
		if words > 0 {
			line += " "
		}
		line += w
		words++
	}
	b.WriteString(line + "\n")
}

// splitAdvice splits a hint into its pieces of advice: at each "; " not
// inside parentheses or quotes.
func splitAdvice(hint string) []string {
	var out []string
	depth, quote, start := 0, rune(0), 0
	for i, r := range hint {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || (r == '\'' && (i == 0 || hint[i-1] == ' ' || hint[i-1] == '(')):
			quote = r // an apostrophe inside a word (host's) opens nothing
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case r == ';' && depth == 0 && strings.HasPrefix(hint[i:], "; "):
			out = append(out, hint[start:i])
			start = i + 2
		}
	}
	if rest := strings.TrimSpace(hint[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

// hintFor says what to do about err from command cmd ("" if nothing).
func hintFor(cmd string, err error) string {
	var ue usageError
	var he hintError
	switch {
	case errors.As(err, &ue) && cmd == "help":
		return "run 'snapctl help' for the list of commands"
	case errors.As(err, &ue):
		return fmt.Sprintf("run 'snapctl help %s'", cmd)
	case errors.As(err, &he):
		return he.hint
	}
	for _, r := range hintRules {
		if !errors.Is(err, r.is) {
			continue
		}
		if h, ok := r.hint(cmd, err); ok {
			return h
		}
	}
	return ""
}

// hintRule gives the hint for errors matching is, unless hint declines
// (false) and leaves the error to the rules after it.
type hintRule struct {
	is   error
	hint func(cmd string, err error) (string, bool)
}

// says is a rule's hint that is always the same.
func says(h string) func(string, error) (string, bool) {
	return func(string, error) (string, bool) { return h, true }
}

// hintRules are tried in order: an error may match more than one
// sentinel, and the first rule that gives a hint wins.
var hintRules = []hintRule{
	{engine.ErrInvalidName, says("set a valid name with --name or SNAPID_NAME")},
	{engine.ErrNoSequence, says("create it first with 'snapctl seq create NAME [--start N] [--max N]'")},
	{registry.ErrInvalidSequence, says("nothing was changed; --start is at least 1 (raised only before the sequence handed out a number), --max at least --start, " +
		"at most 9223372036854775807, and never below numbers already handed out")},
	{engine.ErrSequencesUnsupported, says("sequences need a registry that keeps them (Cassandra: --cassandra or SNAPID_CASSANDRA)")},
	{engine.ErrExhausted, seqShortHint},
	{engine.ErrSequenceShort, seqShortHint},
	{engine.ErrNameMismatch, says("nothing was changed; one counter file serves one node name: give --name the name it is in use under, or use another --counter")},
	{engine.ErrNameBound, says("nothing was issued (give that counter with --counter or SNAPID_COUNTER, or another --name)")},
	{engine.ErrCorrupt, func(_ string, err error) (string, bool) { return corruptHint(err), true }},
	{admin.ErrLowered, says("nothing was changed; the counter is never lowered except by 'snapctl init --force --start N'")},
	{engine.ErrSymlink, says("point --counter at the real file, or remove the link")},
	{engine.ErrNotRegular, says("point --counter at a file, not a directory")},
	{engine.ErrReleased, says("nothing was issued")}, // the error says what to do
	{engine.ErrNameTaken, says("choose another --name, or, if that holder is gone for good, 'snapctl release --force --start N' or 'snapctl register --force --start N'")},
	{engine.ErrProbableClone, says("this counter directory looks copied from a machine still using it: give this machine its own counter (remove the .owner file) and name")},
	{engine.ErrExhausted, says("nothing was issued and the counter did not move (it never passes 2^64-1 or the form's bound): ask for fewer numbers (the error says how many are left), or use a new node name (or a larger --max-id) once it is used up")},
	{cassandra.ErrNoKeyspace, says(noKeyspaceHint)},
	{cassandra.ErrUnknownDataCentre, says("check --replication (SNAPID_REPLICATION)")},
	{cassandra.ErrFragileReplication, says("check --replication (SNAPID_REPLICATION); nothing was created")},
	{cassandra.ErrLocalSerial, says("drop --serial-consistency (SNAPID_SERIAL_CONSISTENCY) or set it to serial")},
	// Before ErrRegistry, which they wrap.
	{cassandra.ErrSchemaAgreement, func(cmd string, _ error) (string, bool) {
		return "what was created stays ('nodetool describecluster' shows each node's schema version): try again once the nodes agree; " +
			"'snapctl setup' makes the schema once, before the hosts start; nothing was issued", cmd != "setup"
	}},
	{engine.ErrReservationExhausted, func(_ string, err error) (string, bool) {
		return "the registry did not extend this host's reserved range: " + registryHint(err) + "; ids flow again once it does", true
	}},
	{engine.ErrRegistry, registryErrorHint},
	{engine.ErrReplaced, says("the counter file was removed or replaced while in use; check it, then start again")},
	{engine.ErrLocked, says("wait until that process lets the lock go, or allow longer with --timeout")},
	{engine.ErrInUse, says("stop the programs using this counter first")},
	{fs.ErrNotExist, notExistHint},
	{fs.ErrPermission, says("check the permissions of the counter file and its directory")},
}

// seqShortHint is the hint of a sequence with too few numbers left, for
// snapctl seq; other commands' exhaustion is left to the later rule.
func seqShortHint(cmd string, err error) (string, bool) {
	if cmd != "seq" {
		return "", false
	}
	return seqExhaustedHint(err), true
}

// registryErrorHint says what to check when the registry failed, and,
// for a command that changes something, that nothing was issued.
func registryErrorHint(cmd string, err error) (string, bool) {
	switch {
	case readOnly[cmd]:
		return registryHint(err), true
	case cmd == "setup":
		// setup issues nothing; what it created, it says itself.
		return registryHint(err) + "; nothing was created", true
	}
	hint := registryHint(err) + "; nothing was issued"
	if cmd == "next" && registryHint(err) == unreachableHint {
		hint += "; " + noRegistryFallback
	}
	return hint, true
}

// notExistHint points at --counter: the commands that create the counter
// need its directory; the others need the counter.
func notExistHint(cmd string, err error) (string, bool) {
	switch {
	case (cmd == "init" || cmd == "next" || cmd == "register") && strings.Contains(err.Error(), "create it first"):
		return "or check --counter", true // the library's error says how to create the directory
	case cmd == "init" || cmd == "next" || cmd == "register":
		return "check --counter; its directory must exist: create it, owned by the user the programs using the counter run as", true
	}
	return "check --counter (its directory must exist), or run 'snapctl init'", true
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
	var fe *engine.FileError
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
		return noKeyspaceHint
	}
	return unreachableHint
}

const (
	// noKeyspaceHint is the advice on a keyspace that does not exist, the
	// same from every command: only setup makes a named keyspace (a first
	// claim makes only the default one).
	noKeyspaceHint = "check --keyspace (SNAPID_KEYSPACE); a keyspace other than the default (snapid, which a first claim creates for a trial) " +
		"is made once with 'snapctl setup --keyspace NAME --replication dc1:3,…'"
	// unreachableHint is the advice on a registry that could not be
	// reached, for want of a better one.
	unreachableHint = "check that Cassandra is reachable (--cassandra / SNAPID_CASSANDRA) and try again"
	// noRegistryFallback is next's documented way through an outage.
	noRegistryFallback = "if ids must be issued meanwhile, 'snapctl next --no-registry' issues from this host's registered counter " +
		"(see docs/operations.md, \"Keep issuing while the registry is down\", for what it no longer bounds)"
)

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

// corruptHint says what to do about a corrupt state file. The library's
// error names the file (ErrCorrupt in a FileError); which file it is tells
// the remedy: the files beside the counter have their own, the host's
// record and an earlier version's files say theirs in the error, and only
// the counter itself is rewritten, by init --force.
func corruptHint(err error) string {
	p := errPath(err, "")
	base := filepath.Base(p)
	switch {
	case p == "":
		return "nothing was issued" // the error says what to do
	case strings.Contains(base, ".seq."):
		return fmt.Sprintf("nothing was changed; stop the programs of this host using the sequence, then remove %s: the next start takes a new lease "+
			"(the old lease's unused numbers are skipped, never issued again)", p)
	case strings.HasSuffix(base, ".mark"):
		return fmt.Sprintf("nothing was changed; stop the programs using this counter, then remove %s: the next start with the registry "+
			"rebuilds it from the registry's mark (raising the counter to that mark)", p)
	case strings.HasSuffix(base, ".owner"):
		return fmt.Sprintf("nothing was changed; restore %s from a backup of this host; if it is lost, stop the programs using this counter, "+
			"remove it, and claim the name again with 'snapctl register' (a new token; add --force --start N above the last id issued "+
			"if the registry still holds the name for the old one)", p)
	case strings.HasSuffix(base, ".session"):
		return fmt.Sprintf("nothing was changed; other processes of this host use the counter with a session file this one cannot use "+
			"(an earlier version of snapid?): stop them all, then start again (the first one rewrites %s)", p)
	case strings.HasSuffix(base, ".forms"), strings.HasSuffix(base, ".forms.copy"), strings.HasSuffix(base, ".number"),
		filepath.Base(filepath.Dir(p)) == "records", filepath.Base(filepath.Dir(p)) == "names":
		return "nothing was issued" // the error says what to do
	}
	return "nothing was changed; find the last id this host issued, then run 'snapctl init --force --start N' with N above it"
}
