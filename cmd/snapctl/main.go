// Command snapctl hands out snapid ids from the shell and administers
// counter files. Run "snapctl help" for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], osEnv())
	stop()
	os.Exit(code)
}
