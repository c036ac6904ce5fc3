package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exampleCommands are the names the examples table is kept by: every
// command, a subcommand of seq as "seq create" (seq itself shows its
// subcommands').
func exampleCommands() []string {
	var names []string
	for _, cmd := range commands {
		if cmd.name != "seq" {
			names = append(names, cmd.name)
		}
	}
	for _, sc := range seqSubcommands {
		names = append(names, "seq "+sc.name)
	}
	return names
}

// Every command's help ends with examples, from the one table; each
// example is a command line of that command whose flags it parses.
func TestEveryCommandHasExamples(t *testing.T) {
	t.Parallel()
	names := exampleCommands()
	for name := range examples {
		assert.Contains(t, names, name, "examples of a command that does not exist")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.NotEmpty(t, examples[name], "no examples")
			f := newFakeEnv(t)
			help := f.run(t, append([]string{"help"}, strings.Fields(name)...)...)
			if name == "help" {
				help = f.run(t, "help")
			}
			require.Equal(t, exitOK, help.code, help.stderr)
			_, after, ok := strings.Cut(help.stdout, "\nexamples:\n")
			require.True(t, ok, "the help has examples: %s", help.stdout)
			for _, e := range examples[name] {
				assert.Contains(t, after, "  # "+e.what+"\n  "+e.line+"\n")
				assert.LessOrEqual(t, len("  "+e.line), 100, "an example fits a terminal: %s", e.line)
				args, ok := strings.CutPrefix(e.line, "snapctl ")
				require.True(t, ok, "an example is a snapctl command line: %s", e.line)
				words := strings.Fields(args)
				require.Equal(t, strings.Fields(name)[0], words[0], "an example of %s runs %s", name, name)
				requireParses(t, f, words)
			}
		})
	}
	// seq's help shows its subcommands' examples.
	r := newFakeEnv(t).run(t, "help", "seq")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, sc := range seqSubcommands {
		for _, e := range examples["seq "+sc.name] {
			assert.Contains(t, r.stdout, e.line)
		}
	}
}

// requireParses requires the command line words (the command first) to
// parse: run with -h after its flags, the command stops at -h, having
// taken every flag before it.
func requireParses(t *testing.T, f *fakeEnv, words []string) {
	t.Helper()
	var out bytes.Buffer
	c := &cli{env: f.env(&out, &out)}
	ctx := context.Background()
	if words[0] == "help" {
		r := f.run(t, words...)
		require.Equal(t, exitOK, r.code, "%q: %s", words, r.stderr)
		return
	}
	var err error
	if words[0] == "seq" {
		sub, rest := positionals(words[1:], 2)
		require.Len(t, sub, 2, "%q: seq SUBCOMMAND NAME", words)
		i := slices.IndexFunc(seqSubcommands, func(sc seqSubcommand) bool { return sc.name == sub[0] })
		require.GreaterOrEqual(t, i, 0, "%q", words)
		err = seqSubcommands[i].run(ctx, c, sub[1], append(rest, "-h"))
	} else {
		err = lookup(words[0]).run(ctx, c, append(slices.Clone(words[1:]), "-h"))
	}
	require.True(t, errors.Is(err, flag.ErrHelp), "%q does not parse: %v", words, err)
}
