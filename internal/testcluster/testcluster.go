// Package testcluster finds the Cassandra node that the tests of snapid and
// snapctl run against: the one scripts/cassandra.sh starts on
// 127.0.0.1:9042, or the comma-separated host[:port] list in
// SNAPID_TEST_CASSANDRA. It is imported by tests only.
//
// A node that is not there fails the test in CI (CI=true: a missing
// Cassandra must never pass silently) and skips it elsewhere, saying how to
// start one.
package testcluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Hosts returns the contact points for tests.
func Hosts() []string {
	v := os.Getenv("SNAPID_TEST_CASSANDRA")
	if v == "" {
		v = "127.0.0.1:9042"
	}
	var hosts []string
	for _, h := range strings.Split(v, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// Require returns the contact points if one of them accepts TCP
// connections, and otherwise fails (CI) or skips tb.
func Require(tb testing.TB) []string {
	tb.Helper()
	hosts := Hosts()
	var errs []string
	for _, h := range hosts {
		addr := h
		if _, _, err := net.SplitHostPort(h); err != nil {
			addr = net.JoinHostPort(h, "9042")
		}
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			return hosts
		}
		errs = append(errs, err.Error())
	}
	missing(tb, fmt.Sprintf("Cassandra not reachable on %s (%s); start it with: bash scripts/cassandra.sh start",
		strings.Join(hosts, ","), strings.Join(errs, "; ")))
	return nil
}

// TLSFiles are the PEM files scripts/cassandra.sh makes for TLS clients of
// its node, which requires a client certificate from its test CA.
type TLSFiles struct {
	CA, Cert, Key string
}

// RequireTLS returns the node's client TLS files: in
// SNAPID_TEST_CASSANDRA_TLS, else in $SNAPID_CASSANDRA_DIR/tls, else in
// ~/.cache/snapid/run/tls. Missing files fail (CI) or skip tb.
func RequireTLS(tb testing.TB) TLSFiles {
	tb.Helper()
	dir := os.Getenv("SNAPID_TEST_CASSANDRA_TLS")
	if dir == "" {
		run := os.Getenv("SNAPID_CASSANDRA_DIR")
		if run == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				tb.Fatal(err)
			}
			run = filepath.Join(home, ".cache", "snapid", "run")
		}
		dir = filepath.Join(run, "tls")
	}
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "client.pem"), Key: filepath.Join(dir, "client-key.pem")}
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if _, err := os.Stat(p); err != nil {
			missing(tb, fmt.Sprintf("no TLS files of the test Cassandra (%v); restart it: bash scripts/cassandra.sh stop && bash scripts/cassandra.sh start", err))
		}
	}
	return f
}

func missing(tb testing.TB, msg string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}
