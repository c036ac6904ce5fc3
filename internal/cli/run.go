package cli

import (
	"context"
	"io"
)

// Env is everything snapctl takes from its surroundings: its environment
// variables, the host's name, the user's home, and its three streams. A
// nil field is the process's own (os.Getenv, os.Hostname,
// os.UserHomeDir, the user's name, os.Stdin, os.Stdout, os.Stderr), but
// Environ: nil is os.Environ only when Getenv is nil too (a Getenv of
// one's own lists no variables unless Environ does).
type Env struct {
	Getenv func(string) string
	// Environ lists the variables, "KEY=value", for the warnings on
	// SNAPID_ variables snapctl does not read.
	Environ  func() []string
	Hostname func() (string, error)
	HomeDir  func() (string, error)
	UserName func() (string, error)
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	// InProcess, for drivers running the commands inside their own
	// process only (nil for snapctl): see InProcess.
	InProcess *InProcess
}

// ExitOK is the exit status of a command that did what it was asked.
const ExitOK = exitOK

// ExitFailure is the exit status of a command that could not do what it
// was asked (check-names that found problems ends with 1, a misused command line with its own status).
const ExitFailure = exitFailure

// Run runs snapctl with args (the command line without the program's
// name) and returns its exit status. Every wait it makes ends with ctx.
// Run may be called from several goroutines at once, each with its own
// Env.
func Run(ctx context.Context, args []string, e Env) int {
	in := osEnv()
	if e.Getenv != nil {
		in.getenv, in.environ = e.Getenv, nil
	}
	if e.Environ != nil {
		in.environ = e.Environ
	}
	if e.Hostname != nil {
		in.hostname = e.Hostname
	}
	if e.HomeDir != nil {
		in.homeDir = e.HomeDir
	}
	if e.UserName != nil {
		in.userName = e.UserName
	}
	if e.Stdin != nil {
		in.stdin = e.Stdin
	}
	if e.Stdout != nil {
		in.stdout = e.Stdout
	}
	if e.Stderr != nil {
		in.stderr = e.Stderr
	}
	in.inproc = e.InProcess
	return run(ctx, args, in)
}
