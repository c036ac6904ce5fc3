// Command snapctl hands out snapid ids from the shell and administers
// counter files. Run "snapctl help" for the commands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/snapid/snapid/internal/cli"
)

// signalGrace is how long, after SIGINT or SIGTERM, snapctl lets the
// command end on its own (every wait it makes ends with its context)
// before it exits without it.
const signalGrace = 200 * time.Millisecond

func main() {
	os.Exit(runWithSignals(os.Args[1:], cli.Env{}, os.Stderr))
}

// runWithSignals runs snapctl with args; SIGINT or SIGTERM ends it at
// once: the command's context ends, and a command still running
// signalGrace later is left (what it wrote is crash-safe: a counter or
// state file is never half-written, and ids are printed only once they
// are durable). The exit status is then 128 plus the signal's number.
func runWithSignals(args []string, e cli.Env, stderr io.Writer) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, args, e) }()
	select {
	case code := <-done:
		return code
	case sig := <-sigs:
		cancel(fmt.Errorf("snapctl: %v received", sig))
		code := 128 + int(sig.(syscall.Signal))
		select {
		case c := <-done:
			if c == cli.ExitOK {
				return c // it finished its work: its output is whole
			}
		case <-time.After(signalGrace):
			fmt.Fprintf(stderr, "snapctl: %v: stopped while waiting\n", sig)
		case <-sigs: // a second signal: now
		}
		return code
	}
}
