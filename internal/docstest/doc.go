// Package docstest holds the tests that keep the documentation true: every
// shell block of README.md and docs/tutorial.md runs, its output checked
// (shell_test.go); the README's Go examples compile against the tree
// (gocode_test.go); every relative link of README.md and docs/ leads to a
// file and heading that exist (links_test.go); every quoted default links
// to docs/reference/defaults.md and says what its row says, and snapctl's
// rows match its flags (defaults_test.go); production.md's capacity table
// is recomputed from the defaults (capacity_test.go). It has no code of
// its own: `go test ./...` (the test command's step 3) runs it.
//
// The shell blocks' conventions, for the docs' authors:
//
//   - A block fenced as ```sh runs in bash (set -e -o pipefail), from the
//     repository's root, in an environment of its own: HOME, the counters'
//     state and SNAPID_BINDING_DIR in a temporary directory, every
//     /var/lib/snapid in the block's text moved into that directory too,
//     snapctl built from the tree first on PATH (GOBIN too, so `go
//     install ./cmd/snapctl` lands there), and a fresh keyspace on the test
//     node (SNAPID_KEYSPACE). The blocks of one file run in order, like one
//     terminal session: each sees the variables exported and the directory
//     left by those before it.
//   - A ```output block right after it is its expected output, stdout and
//     stderr together, with /var/lib/snapid shown as written. In it, a
//     line "..." stands for any lines (none included), "..." inside a line
//     for any text, a lower-case word in angle brackets (<n>, <name>) for
//     one run of non-blank characters, and a run of blanks for any blanks
//     (table columns). Without an output block only the exit status counts.
//   - A block that cannot run in a test (installing from the network, the
//     test command itself, the commands that build a reader's program
//     against a checkout, naming the reader's paths) is fenced ```sh
//     no-run; the test checks that only those commands are marked so, and
//     runs the last with the paths filled in (readme_test.go).
//   - A block that talks to Cassandra (it names cassandra) needs the test
//     node: without one the test fails under CI=true and skips the rest of
//     the file elsewhere.
package docstest
