package cli

import (
	"context"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/snapid/snapid/cassandra"
)

// env is everything snapctl takes from its surroundings, so that commands
// run in-process in tests with their own environment and outputs.
type env struct {
	getenv   func(string) string
	environ  func() []string // every variable, "KEY=value" (nil: none)
	hostname func() (string, error)
	homeDir  func() (string, error)
	userName func() (string, error) // the user running (for the default node name)
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	syncDir  func(dir string) error // nil: syncDir
	// checkReplication judges the registry's replication (check-names);
	// nil: Registry.CheckReplication.
	checkReplication func(*cassandra.Registry, context.Context) (cassandra.ReplicationReport, error)
	// setUpSchema makes the registry's schema (setup); nil:
	// cassandra.SetUpSchema.
	setUpSchema func(context.Context, cassandra.Config) (cassandra.SchemaReport, error)
	inproc      *InProcess // nil: none (see InProcess)
}

func osEnv() env {
	return env{
		getenv:   os.Getenv,
		environ:  os.Environ,
		hostname: os.Hostname,
		homeDir:  os.UserHomeDir,
		userName: currentUserName,
		stdin:    os.Stdin,
		stdout:   os.Stdout,
		stderr:   os.Stderr,
		syncDir:  syncDir,
	}
}

// syncDir fsyncs the directory dir, making the entries made in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// defaultCounterPath is the per-user counter file:
// $XDG_STATE_HOME/snapid/counter.u64, else ~/.local/state/snapid/counter.u64.
func (e env) defaultCounterPath() (string, error) {
	if d := e.getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "snapid", "counter.u64"), nil
	}
	home, err := e.homeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "snapid", "counter.u64"), nil
}

// currentUserName is the name of the user running (its uid when the user
// database has none).
func currentUserName() (string, error) {
	u, err := user.LookupId(strconv.Itoa(os.Geteuid()))
	if err != nil {
		return strconv.Itoa(os.Geteuid()), nil
	}
	return u.Username, nil
}
