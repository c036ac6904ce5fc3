package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
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

// Session returns a direct session to hosts, authenticated by auth (nil:
// none), closed when tb ends. With auth it keeps trying for 90 s: a node
// that requires passwords makes its default superuser shortly after it
// starts.
func Session(tb testing.TB, hosts []string, auth gocql.Authenticator) *gocql.Session {
	tb.Helper()
	cluster := gocql.NewCluster(hosts...)
	cluster.ProtoVersion = 4
	cluster.Timeout = 30 * time.Second
	cluster.ConnectTimeout = 10 * time.Second
	cluster.ReconnectInterval = time.Second // the outage test restarts Cassandra
	cluster.Authenticator = auth
	deadline := time.Now().Add(90 * time.Second)
	for {
		s, err := cluster.CreateSession()
		if err == nil {
			tb.Cleanup(s.Close)
			return s
		}
		if auth == nil || time.Now().After(deadline) {
			tb.Fatalf("no session to Cassandra at %s: %v", strings.Join(hosts, ","), err)
		}
		time.Sleep(time.Second)
	}
}

// Keyspace is a keyspace name of one test's own, dropped when the test
// ends; the keyspace itself is made by whatever uses it first.
type Keyspace struct {
	Hosts []string
	Name  string
	Admin *gocql.Session // direct session for reads and writes around the code under test
}

// NewKeyspace picks a fresh keyspace name on the test node (see Require)
// and connects a direct session.
func NewKeyspace(tb testing.TB) *Keyspace {
	tb.Helper()
	return NewKeyspaceAs(tb, nil)
}

// NewKeyspaceAs is NewKeyspace with the direct session authenticated by
// auth.
func NewKeyspaceAs(tb testing.TB, auth gocql.Authenticator) *Keyspace {
	tb.Helper()
	hosts := Require(tb)
	k := &Keyspace{Hosts: hosts, Name: "snapid_test_" + randomHex(tb), Admin: Session(tb, hosts, auth)}
	tb.Cleanup(func() {
		// Right after the node restarted (the outage test), the session
		// may not have reconnected yet ("no hosts available in the
		// pool"): the drop is tried again until it works or the minute
		// ends.
		if err := k.drop(time.Minute, time.Second); err != nil {
			tb.Errorf("dropping test keyspace %s: %v", k.Name, err)
		}
	})
	return k
}

// randomHex returns 12 random hex digits.
// drop drops the keyspace, trying again every pause until it works or
// budget ends (a session that has not reconnected yet, a coordinator that
// does not know the keyspace's tables yet), and returns the last error.
func (k *Keyspace) drop(budget, pause time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	for {
		err := k.Admin.Query(`DROP KEYSPACE IF EXISTS "` + k.Name + `"`).ExecContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

func randomHex(tb testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Exec runs a statement through the direct session.
func (k *Keyspace) Exec(tb testing.TB, stmt string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Admin.Query(stmt, args...).ExecContext(ctx); err != nil {
		tb.Fatalf("%s: %v", stmt, err)
	}
}

// LocalDC returns the data centre of the node the direct session uses.
func (k *Keyspace) LocalDC(tb testing.TB) string {
	tb.Helper()
	var dc string
	if err := k.Admin.Query(`SELECT data_center FROM system.local`).Scan(&dc); err != nil {
		tb.Fatal(err)
	}
	return dc
}

// Replication returns the replication map of keyspace name, or nil if
// there is no such keyspace.
func (k *Keyspace) Replication(tb testing.TB, name string) map[string]string {
	tb.Helper()
	var m map[string]string
	err := k.Admin.Query(`SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?`, name).Scan(&m)
	if errors.Is(err, gocql.ErrNotFound) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
