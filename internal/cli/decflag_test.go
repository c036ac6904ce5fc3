package cli

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDecimal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"0", 0}, {"1", 1}, {"100", 100}, {"9223372036854775806", 1<<63 - 2},
		{"9223372036854775807", 1<<63 - 1}, {"9223372036854775808", 1 << 63},
		{"18446744073709551615", 1<<64 - 1},
	} {
		got, err := parseDecimal(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, in := range []string{"", "0100", "00", "0x40", "0X40", "0b1", "0o7", "1_000", "+5", "-1", " 5", "5 ", "1e3",
		"18446744073709551616", "99999999999999999999999"} {
		_, err := parseDecimal(in)
		assert.Error(t, err, "%q", in)
	}
}

// Numeric flags are decimal only: "0100" is not octal 64 nor 100, "0x10"
// is not 16; the command is refused and creates nothing.
func TestCLINumericFlagsDecimalOnly(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"seq", "create", "articles", "--start", "0100"},
		{"seq", "create", "articles", "--start", "0x10"},
		{"seq", "create", "articles", "--max", "0100"},
		{"seq", "create", "articles", "--max", "1_000"},
		{"seq", "next", "articles", "-n", "010"},
		{"next", "-n", "0x2"},
		{"next", "-n", "02"},
		{"init", "--start", "0100"},
		{"init", "--start", "0x40"},
		{"register", "--force", "--start", "0100"},
	} {
		f := newFakeEnv(t)
		f.vars["SNAPID_NAME"] = "web_1"
		line := requireError(t, f.run(t, args...))
		assert.Contains(t, line, "decimal", "%q", args)
		requireEmptyDir(t, f.home, "%q creates nothing", args)
	}
	f := newFakeEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "init", "--start", "100")
	require.Equal(t, exitOK, r.code, r.stderr)
}

// --owner's numeric ids: decimal only, within the range of a uid; 2^32-1
// (chown's "unchanged") and anything above are refused, never truncated.
func TestParseNumericID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		id      int
		numeric bool
		bad     bool
	}{
		{"0", 0, true, false},
		{"65534", 65534, true, false},
		{"4294967294", 4294967294, true, false},
		{"4294967295", 0, true, true},
		{"4294967296", 0, true, true},
		{"4295032830", 0, true, true},
		{"18446744073709551615", 0, true, true},
		{"18446744073709551616", 0, true, true},
		{"+65534", 0, true, true},
		{"-1", 0, true, true},
		{" 1", 0, true, true},
		{"01", 0, true, true},
		{"0x10", 0, true, true},
		{"nobody", 0, false, false},
	} {
		id, numeric, err := parseNumericID(tc.in)
		if numeric != tc.numeric || (err != nil) != tc.bad || (!tc.bad && id != tc.id) {
			t.Errorf("parseNumericID(%q) = %d, %v, %v; want %d, numeric %v, refused %v", tc.in, id, numeric, err, tc.id, tc.numeric, tc.bad)
		}
	}
}

// A time limit of 0 or less is refused as it is parsed, on every command
// that takes --timeout, naming the flag, before anything is made or any
// registry asked: never blamed on an unreachable Cassandra, with advice
// to go without it.
func TestTimeoutMustBePositive(t *testing.T) {
	t.Parallel()
	commands := [][]string{{"next"}, {"show"}, {"init"}, {"register"}, {"release"}, {"setup", "--replication", "1"},
		{"status"}, {"names"}, {"check-names"}, {"seq", "create", "s1"}, {"seq", "next", "s1"}, {"seq", "show", "s1"}}
	for _, value := range []string{"0", "0s", "-1s", "-2h"} {
		for _, cmd := range commands {
			t.Run(value+" "+cmd[0], func(t *testing.T) {
				t.Parallel()
				f := newFakeEnv(t)
				f.vars["SNAPID_NAME"] = "web_1"
				f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1" // nothing listens: it must not be asked
				line := requireError(t, f.run(t, append(append([]string{}, cmd...), "--timeout", value)...))
				assert.Contains(t, line, fmt.Sprintf("--timeout %q: want a positive time limit", value))
				assert.NotContains(t, line, "reachable")
				assert.NotContains(t, line, "--no-registry")
				requireEmptyDir(t, f.home, "nothing made")
			})
		}
	}
	// Flags before the command too; a positive limit is taken.
	f := newFakeEnv(t)
	line := requireError(t, f.run(t, "--timeout", "0", "show"))
	assert.Contains(t, line, "want a positive time limit")
	r := f.run(t, "init", "--timeout", "1m")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = f.run(t, "show", "--timeout", "500ms")
	require.Equal(t, exitOK, r.code, r.stderr)
}

// The help lists --timeout as a duration with its default, as before.
func TestTimeoutHelp(t *testing.T) {
	t.Parallel()
	r := newFakeEnv(t).run(t, "help", "names")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^  --timeout duration\n.*\(default 30s\)$`, r.stdout)
}
