package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testT0 is where freezeClock stops a registry's clock.
var testT0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// freezeClock stops r's clock at testT0 and returns a function that sets
// it to testT0 plus d.
func freezeClock(r *Registry) func(d time.Duration) {
	set := func(d time.Duration) { r.now = func() time.Time { return testT0.Add(d) } }
	set(0)
	return set
}

// oneRegistry returns a fresh keyspace, a context bounding the test and a
// registry on that keyspace.
func oneRegistry(tb testing.TB) (*testKeyspace, context.Context, *Registry) {
	tb.Helper()
	k := newTestKeyspace(tb)
	return k, testCtx(tb), k.registry(tb)
}

// mustClaim claims name for owner with testClaim's details.
func mustClaim(tb testing.TB, ctx context.Context, r registry.Registry, name, owner string) registry.Holder {
	tb.Helper()
	h, err := r.Claim(ctx, testClaim(name, owner))
	require.NoError(tb, err)
	return h
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// ---------------------------------------------------------------------------
// Configuration and schema
// ---------------------------------------------------------------------------

func TestConfigRefusedBeforeConnecting(t *testing.T) {
	// A listener that counts connections stands in for Cassandra: an
	// invalid configuration must be refused without a single one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var accepted atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	host := ln.Addr().String()

	cases := map[string]func(*Config){
		"no hosts":                  func(c *Config) { c.Hosts = nil },
		"empty host":                func(c *Config) { c.Hosts = []string{""} },
		"host list in one entry":    func(c *Config) { c.Hosts = []string{"a,b"} },
		"bad port":                  func(c *Config) { c.Hosts = []string{"127.0.0.1:99999"} },
		"keyspace upper case":       func(c *Config) { c.Keyspace = "Snapid" },
		"keyspace injection":        func(c *Config) { c.Keyspace = "a; DROP KEYSPACE x" },
		"keyspace quote":            func(c *Config) { c.Keyspace = `a"b` },
		"keyspace too long":         func(c *Config) { c.Keyspace = "k" + strings.Repeat("a", 48) },
		"keyspace leading digit":    func(c *Config) { c.Keyspace = "1ks" },
		"system keyspace":           func(c *Config) { c.Keyspace = "system_auth" },
		"table hyphen":              func(c *Config) { c.Table = "node-names" },
		"table leading underscore":  func(c *Config) { c.Table = "_names" },
		"replication no class":      func(c *Config) { c.Replication = map[string]string{"replication_factor": "1"} },
		"replication unknown class": func(c *Config) { c.Replication = map[string]string{"class": "LocalStrategy"} },
		"replication factor zero": func(c *Config) {
			c.Replication = map[string]string{"class": "SimpleStrategy", "replication_factor": "0"}
		},
		"replication factor word": func(c *Config) {
			c.Replication = map[string]string{"class": "SimpleStrategy", "replication_factor": "three"}
		},
		"replication quote": func(c *Config) {
			c.Replication = map[string]string{"class": "SimpleStrategy", "replication_factor": "1'}"}
		},
		"simple with dc": func(c *Config) {
			c.Replication = map[string]string{"class": "SimpleStrategy", "replication_factor": "1", "dc1": "3"}
		},
		"simple without factor": func(c *Config) { c.Replication = map[string]string{"class": "SimpleStrategy"} },
		"nts without dcs":       func(c *Config) { c.Replication = map[string]string{"class": "NetworkTopologyStrategy"} },
		"nts bad dc name": func(c *Config) {
			c.Replication = map[string]string{"class": "NetworkTopologyStrategy", "dc'1": "3"}
		},
		"password without user":      func(c *Config) { c.Password = "secret" },
		"negative timeout":           func(c *Config) { c.Timeout = -time.Second },
		"consistency one":            func(c *Config) { c.Consistency = gocql.One },
		"local quorum without dc":    func(c *Config) { c.Consistency = gocql.LocalQuorum },
		"local serial without dc":    func(c *Config) { c.SerialConsistency = gocql.LocalSerial },
		"local serial with dc":       func(c *Config) { c.SerialConsistency, c.LocalDC = gocql.LocalSerial, "dc1" },
		"consistency all":            func(c *Config) { c.Consistency = gocql.All },
		"serial consistency invalid": func(c *Config) { c.SerialConsistency = gocql.Consistency(3) },
		"serial consistency quorum":  func(c *Config) { c.SerialConsistency = gocql.Quorum },
		"consistency serial":         func(c *Config) { c.Consistency = gocql.Serial },
		"tls cert without key":       func(c *Config) { c.TLSCertFile = "/nonexistent/cert.pem" },
		"tls ca missing":             func(c *Config) { c.TLSCAFile = "/nonexistent/ca.pem" },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Hosts: []string{host}}
			mod(&cfg)
			r, err := NewRegistry(testCtx(t), cfg)
			require.ErrorIs(t, err, snapid.ErrInvalidOption)
			assert.Nil(t, r)
			assert.Contains(t, err.Error(), "Cassandra registry")
		})
	}
	ln.Close()
	<-done
	assert.Zero(t, accepted.Load(), "an invalid configuration opened a connection")
}

func TestCassandraReplicationCQL(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]string
		want string
	}{
		{nil, "{'class': 'SimpleStrategy', 'replication_factor': '1'}"},
		{map[string]string{"class": "SimpleStrategy", "replication_factor": "3"},
			"{'class': 'SimpleStrategy', 'replication_factor': '3'}"},
		{map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", "dc2": "3", "dc1": "5"},
			"{'class': 'NetworkTopologyStrategy', 'dc1': '5', 'dc2': '3'}"},
		{map[string]string{"class": "NetworkTopologyStrategy", "eu-west.1": "3"},
			"{'class': 'NetworkTopologyStrategy', 'eu-west.1': '3'}"},
	} {
		got, err := replicationCQL(tc.in)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	assert.NoError(t, (&Config{Hosts: []string{"[::1]:9042", "db1", "db2:9043"}}).Validate())
}

func TestCassandraSchemaIdempotent(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	r1 := k.registry(t)
	name := testName(t)
	mustClaim(t, ctx, r1, name, "owner_a")

	// Opening again (schema present) changes nothing and sees the row.
	r2 := k.registry(t)
	h, err := r2.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, "owner_a", h.Owner)
	r3 := k.registry(t, func(c *Config) { c.NoCreate = true })
	rows, err := r3.List(ctx)
	require.NoError(t, err)
	assert.Len(t, rows, 1)

	// NoCreate on a missing table, and a table with the wrong columns.
	_, err = NewRegistry(ctx, Config{Hosts: k.Hosts, Keyspace: k.Name, Table: "missing", NoCreate: true})
	require.ErrorIs(t, err, snapid.ErrRegistry)
	assert.Contains(t, err.Error(), "does not exist")
	k.Exec(t, `CREATE TABLE "`+k.Name+`".wrong (name text PRIMARY KEY, owner text, reserved int)`)
	_, err = NewRegistry(ctx, Config{Hosts: k.Hosts, Keyspace: k.Name, Table: "wrong"})
	require.ErrorIs(t, err, snapid.ErrRegistry)
	assert.Contains(t, err.Error(), "column reserved is int, want bigint")
	assert.Contains(t, err.Error(), "column claim_token is missing")

	// A reserved word is a valid table name: identifiers are quoted.
	r4 := k.registry(t, func(c *Config) { c.Table = "select" })
	mustClaim(t, ctx, r4, name, "owner_b")
}

func TestCassandraBadReplicationCreatesNothing(t *testing.T) {
	k := newTestKeyspace(t)
	_, err := NewRegistry(testCtx(t), Config{Hosts: k.Hosts, Keyspace: k.Name,
		Replication: map[string]string{"class": "SimpleStrategy", "replication_factor": "x"}})
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	assert.False(t, k.keyspaceExists(t, k.Name))
}

func TestCassandraConnectHonoursContext(t *testing.T) {
	// A server that accepts connections and never answers: the driver's
	// handshake would wait for its own timeouts (a minute here); the
	// context ends first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = NewRegistry(ctx, Config{Hosts: []string{ln.Addr().String()},
		ConnectTimeout: time.Minute, Timeout: time.Minute})
	require.ErrorIs(t, err, snapid.ErrRegistry)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 30*time.Second, "returned when the context ended, not at the driver's timeout")
}

// ---------------------------------------------------------------------------
// Input validation: nothing is sent
// ---------------------------------------------------------------------------

// countingQuerier fails the test's expectations if anything is sent.
type countingQuerier struct{ calls atomic.Int32 }

func (c *countingQuerier) CAS(context.Context, *cql.Record, string, ...any) (bool, error) {
	c.calls.Add(1)
	return false, errors.New("unexpected statement")
}

func (c *countingQuerier) SerialRead(context.Context, *cql.Record, string) (bool, error) {
	c.calls.Add(1)
	return false, errors.New("unexpected read")
}

func TestCassandraBadInputSendsNothing(t *testing.T) {
	r := newRegistry(nil, &gocqlQuerier{}, "ks", "tbl", nil)
	q := &countingQuerier{}
	r.q = q
	ctx := context.Background()
	good := registry.Claim{Name: "web_1", Owner: "0123456789abcdef0123456789abcdef"}

	claims := map[string]func(*registry.Claim){
		"invalid name":        func(c *registry.Claim) { c.Name = "Web-1" },
		"empty name":          func(c *registry.Claim) { c.Name = "" },
		"empty owner":         func(c *registry.Claim) { c.Owner = "" },
		"owner with space":    func(c *registry.Claim) { c.Owner = "a b" },
		"owner too long":      func(c *registry.Claim) { c.Owner = strings.Repeat("a", 129) },
		"host name too long":  func(c *registry.Claim) { c.Hostname = strings.Repeat("h", 1025) },
		"negative clone wind": func(c *registry.Claim) { c.CloneWindow = -time.Second },
	}
	for what, mod := range claims {
		c := good
		mod(&c)
		_, err := r.Claim(ctx, c)
		require.Error(t, err, what)
		assert.True(t, errors.Is(err, snapid.ErrInvalidName) || errors.Is(err, snapid.ErrInvalidOption), "%s: %v", what, err)
	}
	for _, tc := range []struct{ name, owner string }{{"9lives", "o"}, {"ok", ""}, {"ok", "o\n"}} {
		_, err := r.Extend(ctx, tc.name, tc.owner, "session", 1, 2)
		assert.Error(t, err)
		assert.Error(t, r.Touch(ctx, tc.name, tc.owner, "session"))
		assert.Error(t, r.Release(ctx, tc.name, tc.owner, 5))
	}
	_, err := r.Get(ctx, "bad name")
	assert.ErrorIs(t, err, snapid.ErrInvalidName)
	assert.Zero(t, q.calls.Load(), "a statement was sent for bad input")
}

// ---------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------

func TestCassandraClaimByTwoOwners(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	ra, rb := k.registry(t), k.registry(t)
	name := testName(t)

	ca := registry.Claim{Name: name, Owner: "secret_token_a", Hostname: "web1.example", Address: "192.0.2.1", MachineID: "m1"}
	ha, err := ra.Claim(ctx, ca)
	require.NoError(t, err)
	assert.Equal(t, name, ha.Name)
	assert.Equal(t, "secret_token_a", ha.Owner)
	assert.Equal(t, registry.StateActive, ha.State)
	assert.Equal(t, "web1.example", ha.Hostname)
	assert.Equal(t, "m1", ha.MachineID)
	assert.Zero(t, ha.Reserved)
	assert.False(t, ha.RegisteredAt.IsZero())
	got, err := ra.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, ha, got, "registry.Claim returns the row as stored")
	before, _ := rawRow(t, ra, name)

	_, err = rb.Claim(ctx, testClaim(name, "owner_b"))
	require.ErrorIs(t, err, snapid.ErrNameTaken)
	msg := err.Error()
	assert.Contains(t, msg, name)
	assert.Contains(t, msg, "web1.example", "the message names the holder's host")
	assert.Contains(t, msg, "192.0.2.1", "the message names the holder's address")
	assert.Contains(t, msg, "since "+ha.RegisteredAt.UTC().Format(time.RFC3339), "the message says since when")
	assert.NotContains(t, msg, "secret_token", "the owner token is not printed")
	after, _ := rawRow(t, ra, name)
	assert.Equal(t, before, after, "a refused claim changes nothing")
}

func TestCassandraConcurrentClaims(t *testing.T) {
	const claimers, rounds = 16, 10
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	regs := make([]*Registry, claimers)
	for i := range regs {
		regs[i] = k.registry(t) // a session of its own, as separate hosts have
	}
	race := func(t *testing.T, name string) {
		start := make(chan struct{})
		errs := make([]error, claimers)
		holders := make([]registry.Holder, claimers)
		var wg sync.WaitGroup
		for i, r := range regs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				holders[i], errs[i] = r.Claim(ctx, testClaim(name, fmt.Sprintf("owner_%02d", i)))
			}()
		}
		close(start)
		wg.Wait()
		var winners []string
		for i, err := range errs {
			if err == nil {
				winners = append(winners, holders[i].Owner)
				continue
			}
			require.ErrorIs(t, err, snapid.ErrNameTaken, "claimer %d", i)
		}
		require.Len(t, winners, 1, "exactly one claimer wins")
		h, err := regs[0].Get(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, winners[0], h.Owner, "the stored owner is the winner")
	}
	t.Run("new name", func(t *testing.T) {
		for round := 0; round < rounds; round++ {
			race(t, testName(t))
		}
	})
	t.Run("released name", func(t *testing.T) {
		// Every claimer sees the released row and races the conditional
		// take-over; the losers look again and find the winner.
		for round := 0; round < rounds; round++ {
			name := testName(t)
			_, err := regs[0].Claim(ctx, testClaim(name, "owner_old"))
			require.NoError(t, err)
			require.NoError(t, regs[0].Release(ctx, name, "owner_old", 99))
			race(t, name)
			h, err := regs[0].Get(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, uint64(99), h.Reserved)
		}
	})
}

func TestCassandraSameOwnerRestart(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	at := freezeClock(r)
	name := testName(t)
	c := testClaim(name, "owner_a")
	c.CloneWindow = 5 * time.Minute
	h1, err := r.Claim(ctx, c)
	require.NoError(t, err)
	_, err = r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 0, 1000)
	require.NoError(t, err)

	// The same machine restarts a second later: passes, last_seen moves,
	// the address may change, the mark and registered-at stay.
	at(time.Second)
	c.Address = "192.0.2.99"
	h2, err := r.Claim(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, testT0.Add(time.Second), h2.LastSeen)
	assert.Equal(t, h1.RegisteredAt, h2.RegisteredAt)
	assert.Equal(t, uint64(1000), h2.Reserved)
	assert.Equal(t, "192.0.2.99", h2.Address)
	got, err := r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, h2, got)
}

func TestCassandraCloneDetection(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	at := freezeClock(r)
	name := testName(t)
	orig := testClaim(name, "owner_a")
	orig.CloneWindow = 5 * time.Minute
	_, err := r.Claim(ctx, orig)
	require.NoError(t, err)
	before, _ := rawRow(t, r, name)

	clone := orig
	clone.MachineID = "machine-copy"
	clone.Hostname = "copy.example"
	at(4 * time.Minute)
	_, err = r.Claim(ctx, clone)
	require.ErrorIs(t, err, snapid.ErrProbableClone)
	assert.Contains(t, err.Error(), "owner_a.example")
	assert.Contains(t, err.Error(), "copy.example")
	clone.Force = true
	_, err = r.Claim(ctx, clone)
	require.ErrorIs(t, err, snapid.ErrProbableClone, "Force does not bypass the clone check")
	after, _ := rawRow(t, r, name)
	assert.Equal(t, before, after, "a refused clone changes nothing")

	// Only the machine id differs: still a clone.
	idOnly := orig
	idOnly.MachineID = "machine-copy"
	_, err = r.Claim(ctx, idOnly)
	require.ErrorIs(t, err, snapid.ErrProbableClone)

	// Not seen for longer than the window: the machine moved; it passes.
	clone.Force = false
	at(6 * time.Minute)
	h, err := r.Claim(ctx, clone)
	require.NoError(t, err)
	assert.Equal(t, "copy.example", h.Hostname)
	assert.Equal(t, "machine-copy", h.MachineID)

	// A window of zero turns the check off.
	orig.CloneWindow = 0
	_, err = r.Claim(ctx, orig)
	require.NoError(t, err)
}

func TestCassandraReleaseAndTakeOver(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	ra, rb := k.registry(t), k.registry(t)
	name := testName(t)
	mustClaim(t, ctx, ra, name, "owner_a")
	_, err := ra.Extend(ctx, name, "owner_a", sessionOf(t, ra, name), 0, 5000)
	require.NoError(t, err)
	err = ra.Release(ctx, name, "owner_a", 4999)
	require.ErrorIs(t, err, registry.ErrMarkMoved, "a release cannot record less than the mark")
	require.NoError(t, ra.Release(ctx, name, "owner_a", 5042))
	got, err := ra.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, registry.StateReleased, got.State)
	assert.Equal(t, uint64(5042), got.Reserved)

	hb := mustClaim(t, ctx, rb, name, "owner_b")
	assert.Equal(t, "owner_b", hb.Owner)
	assert.Equal(t, registry.StateActive, hb.State)
	assert.Equal(t, uint64(5042), hb.Reserved, "the new holder starts above the old holder's final value")
	assert.Equal(t, "owner_b.example", hb.Hostname)
	got, err = rb.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, hb, got)

	// The old owner is now refused everywhere, and changes nothing.
	before, _ := rawRow(t, ra, name)
	_, err = ra.Claim(ctx, testClaim(name, "owner_a"))
	assert.ErrorIs(t, err, snapid.ErrNameTaken)
	assert.ErrorIs(t, ra.Release(ctx, name, "owner_a", 1), snapid.ErrNameTaken)
	after, _ := rawRow(t, ra, name)
	assert.Equal(t, before, after)
}

func TestCassandraSameOwnerReclaimsReleased(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	name := testName(t)
	c := testClaim(name, "owner_a")
	c.CloneWindow = time.Hour
	_, err := r.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, r.Release(ctx, name, "owner_a", 77))
	// Released: the clone check does not apply, the mark is kept.
	c.MachineID = "other"
	h, err := r.Claim(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, registry.StateActive, h.State)
	assert.Equal(t, uint64(77), h.Reserved)
}

func TestCassandraForcedTakeOver(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)
	ra, rb := k.registry(t), k.registry(t)

	for _, tc := range []struct {
		mark, floor, want uint64
	}{
		{mark: 1000, floor: 500, want: 1000},
		{mark: 1000, floor: 5000, want: 5000},
		{mark: math.MaxUint64 - 1, floor: 7, want: math.MaxUint64 - 1},
	} {
		name := testName(t)
		mustClaim(t, ctx, ra, name, "owner_a")
		_, err := ra.Extend(ctx, name, "owner_a", sessionOf(t, ra, name), 0, tc.mark)
		require.NoError(t, err)

		c := testClaim(name, "owner_b")
		c.Floor = tc.floor
		_, err = rb.Claim(ctx, c)
		require.ErrorIs(t, err, snapid.ErrNameTaken, "no take-over without Force")
		c.Force = true
		h, err := rb.Claim(ctx, c)
		require.NoError(t, err)
		assert.Equal(t, "owner_b", h.Owner)
		assert.Equal(t, tc.want, h.Reserved)
		got, err := rb.Get(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, h, got)

		// The old holder's process is now shut out without changing the row.
		before, _ := rawRow(t, ra, name)
		_, err = ra.Extend(ctx, name, "owner_a", sessionOf(t, ra, name), tc.mark, tc.mark+10)
		assert.ErrorIs(t, err, snapid.ErrNameTaken)
		assert.ErrorIs(t, ra.Touch(ctx, name, "owner_a", sessionOf(t, ra, name)), snapid.ErrNameTaken)
		assert.ErrorIs(t, ra.Release(ctx, name, "owner_a", tc.mark), snapid.ErrNameTaken)
		after, _ := rawRow(t, ra, name)
		assert.Equal(t, before, after)
	}
}

func TestCassandraPartialRow(t *testing.T) {
	k, ctx, r := oneRegistry(t)
	name := testName(t)
	// A row another tool left without owner, state or token, as a plain
	// upsert racing a delete would.
	k.Exec(t, `UPDATE "`+k.Name+`".node_names SET reserved = ?, last_seen = ? WHERE name = ?`,
		int64(300), time.Now(), name)

	_, err := r.Claim(ctx, testClaim(name, "owner_a"))
	require.ErrorIs(t, err, snapid.ErrNameTaken, "a row without owner is not free")
	assert.ErrorIs(t, r.Touch(ctx, name, "owner_a", sessionOf(t, r, name)), snapid.ErrNameTaken)
	c := testClaim(name, "owner_a")
	c.Force, c.Floor = true, 100
	h, err := r.Claim(ctx, c)
	require.NoError(t, err, "the condition binds null where the row holds null")
	assert.Equal(t, uint64(300), h.Reserved)
	assert.Equal(t, "owner_a", h.Owner)
}

// ---------------------------------------------------------------------------
// Extend, Touch, Release: conditional, never resurrecting
// ---------------------------------------------------------------------------

func TestCassandraExtend(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	name := testName(t)
	mustClaim(t, ctx, r, name, "owner_a")

	h, err := r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 0, 1000)
	require.NoError(t, err)
	assert.Equal(t, uint64(1000), h.Reserved)
	got, err := r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, uint64(1000), got.Reserved)
	assert.Equal(t, h.LastSeen, got.LastSeen)

	// Wrong old mark: the current row comes back with registry.ErrMarkMoved.
	before, _ := rawRow(t, r, name)
	h, err = r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 500, 2000)
	require.ErrorIs(t, err, registry.ErrMarkMoved)
	assert.Equal(t, uint64(1000), h.Reserved)
	assert.Equal(t, "owner_a.example", h.Hostname, "the whole row is returned")
	assert.Equal(t, registry.StateActive, h.State)
	after, _ := rawRow(t, r, name)
	assert.Equal(t, before, after)

	// Lowering returns an unused reservation; the top of uint64 survives
	// the trip through bigint.
	_, err = r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 1000, 10)
	require.NoError(t, err)
	_, err = r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 10, math.MaxUint64)
	require.NoError(t, err)
	got, err = r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, uint64(math.MaxUint64), got.Reserved)
	_, err = r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), math.MaxUint64, 1<<63)
	require.NoError(t, err)
	got, err = r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<63), got.Reserved)
}

func TestCassandraNoResurrection(t *testing.T) {
	k, ctx, r := oneRegistry(t)

	t.Run("released", func(t *testing.T) {
		name := testName(t)
		mustClaim(t, ctx, r, name, "owner_a")
		require.NoError(t, r.Release(ctx, name, "owner_a", 50))
		before, _ := rawRow(t, r, name)
		_, err := r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 50, 100)
		require.ErrorIs(t, err, snapid.ErrNameTaken)
		assert.Contains(t, err.Error(), "released")
		assert.ErrorIs(t, r.Touch(ctx, name, "owner_a", sessionOf(t, r, name)), snapid.ErrNameTaken)
		after, _ := rawRow(t, r, name)
		assert.Equal(t, before, after, "every column unchanged")
		assert.Equal(t, registry.StateReleased, after["state"])
	})
	t.Run("deleted", func(t *testing.T) {
		name := testName(t)
		mustClaim(t, ctx, r, name, "owner_a")
		k.Exec(t, `DELETE FROM "`+k.Name+`".node_names WHERE name = ?`, name)
		_, err := r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 0, 100)
		require.ErrorIs(t, err, snapid.ErrNameTaken)
		assert.ErrorIs(t, err, registry.ErrNotRegistered)
		assert.ErrorIs(t, r.Touch(ctx, name, "owner_a", sessionOf(t, r, name)), snapid.ErrNameTaken)
		assert.ErrorIs(t, r.Release(ctx, name, "owner_a", 100), snapid.ErrNameTaken)
		_, found := rawRow(t, r, name)
		assert.False(t, found, "no partial row was created")
		_, err = r.Get(ctx, name)
		assert.ErrorIs(t, err, registry.ErrNotRegistered)
	})
}

func TestCassandraTouch(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	at := freezeClock(r)
	name := testName(t)
	mustClaim(t, ctx, r, name, "owner_a")
	at(time.Minute)
	require.NoError(t, r.Touch(ctx, name, "owner_a", sessionOf(t, r, name)))
	got, err := r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, testT0.Add(time.Minute), got.LastSeen)
	assert.ErrorIs(t, r.Touch(ctx, name, "owner_b", sessionOf(t, r, name)), snapid.ErrNameTaken)
}

func TestCassandraListAndGet(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	r.pageSize = 2 // several pages
	var names []string
	for i := 0; i < 5; i++ {
		name := testName(t)
		names = append(names, name)
		_, err := r.Claim(ctx, testClaim(name, fmt.Sprintf("owner_%d", i)))
		require.NoError(t, err)
	}
	require.NoError(t, r.Release(ctx, names[0], "owner_0", 9))
	rows, err := r.List(ctx)
	require.NoError(t, err)
	var got []string
	for _, h := range rows {
		got = append(got, h.Name)
		if h.Name == names[0] {
			assert.Equal(t, registry.StateReleased, h.State)
			assert.Equal(t, uint64(9), h.Reserved)
		}
	}
	slices.Sort(got)
	slices.Sort(names)
	assert.Equal(t, names, got)

	_, err = r.Get(ctx, testName(t))
	assert.ErrorIs(t, err, registry.ErrNotRegistered)
}

// ---------------------------------------------------------------------------
// Unknown outcomes, against the real Cassandra with lost replies injected
// ---------------------------------------------------------------------------

var (
	errCASTimeout = &gocql.RequestErrWriteTimeout{WriteType: "CAS"}
	errUnavail    = &gocql.RequestErrUnavailable{}
)

func TestCassandraUnknownOutcomeClaim(t *testing.T) {
	k := newTestKeyspace(t)
	ctx := testCtx(t)

	t.Run("insert applied, reply lost", func(t *testing.T) {
		r := k.registry(t)
		l := lossy(r, func(n int, _ string) lossPlan {
			return lossPlan{loseReply: n == 1, err: errCASTimeout}
		})
		name := testName(t)
		h := mustClaim(t, ctx, r, name, "owner_a")
		assert.Equal(t, "owner_a", h.Owner)
		assert.Equal(t, 1, l.casCalls, "resolved by the read, not sent again")
		assert.Equal(t, 1, l.reads)
		got, err := r.Get(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, h, got)
	})
	t.Run("insert never ran", func(t *testing.T) {
		r := k.registry(t)
		l := lossy(r, func(n int, _ string) lossPlan {
			return lossPlan{dropRequest: n == 1, err: gocql.ErrTimeoutNoResponse}
		})
		name := testName(t)
		h := mustClaim(t, ctx, r, name, "owner_a")
		assert.Equal(t, "owner_a", h.Owner)
		assert.Equal(t, 2, l.casCalls, "the condition still held: sent again")
	})
	t.Run("insert never ran, another owner won meanwhile", func(t *testing.T) {
		r, other := k.registry(t), k.registry(t)
		name := testName(t)
		lossy(r, func(n int, _ string) lossPlan {
			if n != 1 {
				return lossPlan{}
			}
			return lossPlan{dropRequest: true, err: errCASTimeout, before: func() {
				_, err := other.Claim(ctx, testClaim(name, "owner_b"))
				assert.NoError(t, err)
			}}
		})
		_, err := r.Claim(ctx, testClaim(name, "owner_a"))
		require.ErrorIs(t, err, snapid.ErrNameTaken)
		got, err := r.Get(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, "owner_b", got.Owner)
	})
	t.Run("take-over applied, reply lost", func(t *testing.T) {
		r, old := k.registry(t), k.registry(t)
		name := testName(t)
		mustClaim(t, ctx, old, name, "owner_old")
		require.NoError(t, old.Release(ctx, name, "owner_old", 321))
		l := lossy(r, func(_ int, stmt string) lossPlan {
			return lossPlan{loseReply: strings.HasPrefix(stmt, "UPDATE"), err: errUnavail}
		})
		h := mustClaim(t, ctx, r, name, "owner_a")
		assert.Equal(t, "owner_a", h.Owner)
		assert.Equal(t, uint64(321), h.Reserved)
		assert.Equal(t, 2, l.casCalls)
	})
	t.Run("take-over never ran", func(t *testing.T) {
		r, old := k.registry(t), k.registry(t)
		name := testName(t)
		mustClaim(t, ctx, old, name, "owner_old")
		require.NoError(t, old.Release(ctx, name, "owner_old", 321))
		updates := 0
		l := lossy(r, func(_ int, stmt string) lossPlan {
			if !strings.HasPrefix(stmt, "UPDATE") {
				return lossPlan{}
			}
			updates++
			return lossPlan{dropRequest: updates == 1, err: context.DeadlineExceeded}
		})
		h := mustClaim(t, ctx, r, name, "owner_a")
		assert.Equal(t, uint64(321), h.Reserved)
		assert.Equal(t, 3, l.casCalls, "insert, lost update, update sent again")
	})
	t.Run("reply lost and the read fails", func(t *testing.T) {
		r := k.registry(t)
		readErr := errors.New("read failed too")
		lossy(r, func(n int, _ string) lossPlan {
			return lossPlan{loseReply: true, err: errCASTimeout, failRead: readErr}
		})
		_, err := r.Claim(ctx, testClaim(testName(t), "owner_a"))
		require.ErrorIs(t, err, snapid.ErrRegistry)
		assert.ErrorIs(t, err, readErr)
		var wt *gocql.RequestErrWriteTimeout
		assert.ErrorAs(t, err, &wt)
		assert.Contains(t, err.Error(), "outcome is unknown")
	})
	t.Run("context ended", func(t *testing.T) {
		r := k.registry(t)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		l := lossy(r, func(int, string) lossPlan {
			return lossPlan{dropRequest: true, err: context.Canceled, before: cancel}
		})
		_, err := r.Claim(cctx, testClaim(testName(t), "owner_a"))
		require.ErrorIs(t, err, snapid.ErrRegistry)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "outcome is unknown")
		assert.Zero(t, l.reads, "nothing more is sent once the context ended")
	})
	t.Run("definite failure is not resolved", func(t *testing.T) {
		r := k.registry(t)
		l := lossy(r, func(int, string) lossPlan {
			return lossPlan{dropRequest: true, err: gocql.ErrNoConnections}
		})
		_, err := r.Claim(ctx, testClaim(testName(t), "owner_a"))
		require.ErrorIs(t, err, snapid.ErrRegistry)
		assert.ErrorIs(t, err, gocql.ErrNoConnections)
		assert.Zero(t, l.reads)
	})
}

func TestCassandraUnknownOutcomeUpdates(t *testing.T) {
	_, ctx, r := oneRegistry(t)
	name := testName(t)
	mustClaim(t, ctx, r, name, "owner_a")
	// From here on, the first send of each statement is lost after it ran
	// (odd calls) or before (when drop is set).
	var drop bool
	l := lossy(r, func(n int, _ string) lossPlan {
		if n%2 == 0 {
			return lossPlan{}
		}
		return lossPlan{loseReply: !drop, dropRequest: drop, err: errCASTimeout}
	})

	_, err := r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 0, 100)
	require.NoError(t, err, "applied, reply lost")
	assert.Equal(t, 1, l.casCalls)
	l.casCalls = 0 // 1 is odd again
	drop = true
	_, err = r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 100, 200)
	require.NoError(t, err, "never ran: sent again")
	assert.Equal(t, 2, l.casCalls)
	got, err := r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, uint64(200), got.Reserved)

	l.casCalls = 0
	require.NoError(t, r.Touch(ctx, name, "owner_a", sessionOf(t, r, name)))
	assert.Equal(t, 2, l.casCalls)

	l.casCalls = 0
	drop = false
	require.NoError(t, r.Release(ctx, name, "owner_a", 250))
	assert.Equal(t, 1, l.casCalls)
	got, err = r.Get(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, registry.StateReleased, got.State)
	assert.Equal(t, uint64(250), got.Reserved)

	// Lost reply on a statement whose condition failed: resolved as lost.
	l.casCalls = 0
	_, err = r.Extend(ctx, name, "owner_a", sessionOf(t, r, name), 250, 300)
	require.ErrorIs(t, err, snapid.ErrNameTaken)
}

// ---------------------------------------------------------------------------
// Benchmark
// ---------------------------------------------------------------------------

// BenchmarkClaim measures claim latency against the real Cassandra: "first"
// claims a fresh name (one LWT), "reclaim" claims a held name again as the
// same owner (the failed insert, then the conditional update). It reports
// the median besides the mean.
func BenchmarkClaim(b *testing.B) {
	k := newTestKeyspace(b)
	r := k.registry(b)
	ctx := context.Background()
	report := func(b *testing.B, d []time.Duration) {
		slices.Sort(d)
		if len(d) > 0 {
			b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
		}
	}
	b.Run("first", func(b *testing.B) {
		names := make([]string, b.N)
		for i := range names {
			names[i] = testName(b)
		}
		d := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, err := r.Claim(ctx, testClaim(names[i], "owner_a")); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
		}
		b.StopTimer()
		report(b, d)
	})
	b.Run("reclaim", func(b *testing.B) {
		name := testName(b)
		if _, err := r.Claim(ctx, testClaim(name, "owner_a")); err != nil {
			b.Fatal(err)
		}
		d := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, err := r.Claim(ctx, testClaim(name, "owner_a")); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
		}
		b.StopTimer()
		report(b, d)
	})
}

// sessionOf returns the session of the row for name as it stands (the
// latest claim's), or "none" if there is no row.
func sessionOf(t *testing.T, r registry.Registry, name string) string {
	t.Helper()
	h, err := r.Get(context.Background(), name)
	if err != nil {
		return "none"
	}
	return h.Session
}

// TestConformance runs registrytest's conformance suite, which every
// registry.Registry must pass, on the real Cassandra. The subtests share one
// keyspace and one registry: each uses names of its own.
func TestConformance(t *testing.T) {
	_, _, r := oneRegistry(t)
	registrytest.TestRegistry(t, func(*testing.T) registry.Registry { return r })
}

// TestNumberConformance runs the node numbers' conformance suite on the
// real Cassandra, each subtest on a keyspace of its own.
func TestNumberConformance(t *testing.T) {
	registrytest.TestNumberRegistry(t, func(t *testing.T) registry.NumberRegistry { _, _, r := oneRegistry(t); return r })
}
