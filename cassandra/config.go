package cassandra

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/registry"
)

// Defaults of Config.
const (
	DefaultKeyspace          = "snapid"
	DefaultTable             = "node_names"
	DefaultTimeout           = 12 * time.Second // above the server's 10 s request timeouts
	DefaultConnectTimeout    = 10 * time.Second
	DefaultReconnectInterval = 5 * time.Second
	DefaultPort              = 9042
)

// Config configures NewRegistry. The zero value of every
// field but Hosts means its default.
type Config struct {
	// Hosts are the contact points, "host" or "host:port" (IPv6 as
	// "[::1]:9042"); the default port is 9042. At least one is required.
	Hosts []string

	// Keyspace and Table name the registry table (defaults "snapid" and
	// "node_names"). They are CQL identifiers written into statements (they
	// cannot be bound), so they must match ^[a-z][a-z0-9_]{0,47}$, and the
	// keyspace cannot start with "system".
	Keyspace string
	Table    string

	// Replication is the keyspace's replication map, used only when the
	// keyspace is created. Default {"class": "SimpleStrategy",
	// "replication_factor": "1"}, which is only fit for a one-node cluster
	// (tests, development): on a cluster of several nodes a replication
	// that cannot survive the loss of one node is refused unless
	// AllowFragileReplication is set (see ErrFragileReplication). For
	// production use NetworkTopologyStrategy with a factor per data centre,
	// for example {"class": "NetworkTopologyStrategy", "dc1": "3",
	// "dc2": "3"}. Keys and values are validated: the class must be
	// SimpleStrategy (with replication_factor only) or
	// NetworkTopologyStrategy (data-centre names, or replication_factor),
	// and every factor a positive integer.
	Replication map[string]string

	// NoCreate skips CREATE KEYSPACE and CREATE TABLE; the table must
	// exist. Without it they run only when the table does not exist yet, so
	// a user with SELECT and MODIFY on an existing registry keyspace (and no
	// CREATE permission) works either way. The table's columns are checked
	// either way.
	NoCreate bool

	// NoCreateKeyspace refuses a missing keyspace (ErrNoKeyspace, naming
	// the keyspaces that hold a registry) instead of creating it; missing
	// tables of an existing keyspace are still created (unless NoCreate).
	// snapctl sets it for a keyspace named explicitly, so that a misspelt
	// --keyspace is reported rather than created: such a keyspace is made
	// by SetUpSchema (snapctl setup).
	NoCreateKeyspace bool

	// Username and Password turn on password authentication.
	Username string
	Password string

	// TLS, when set, is the TLS configuration (it is cloned). TLSCAFile,
	// TLSCertFile and TLSKeyFile are PEM files added to it (or to a new
	// configuration that verifies the server when TLS is nil): a CA to
	// verify the servers with, and a client certificate and its key (both
	// or neither). Any of the four turns TLS on.
	TLS         *tls.Config
	TLSCAFile   string
	TLSCertFile string
	TLSKeyFile  string

	// Timeout is the client-side timeout of one statement (default 12 s).
	// Keep it above the server's request timeouts (10 s by default), or a
	// statement the server is still working on is abandoned as a client
	// timeout, which for an LWT is an outcome to resolve.
	Timeout time.Duration
	// ConnectTimeout bounds each connection attempt (default 10 s).
	ConnectTimeout time.Duration
	// ReconnectInterval is how often nodes seen down are tried again
	// (default 5 s), so that a Generator resumes soon after an outage.
	ReconnectInterval time.Duration

	// Consistency is the consistency of the commit phase of LWTs (the
	// write that follows once a quorum of all replicas accepted the change
	// at SERIAL) and of List's plain reads (snapctl check-names). Every
	// decision about a name is taken by a read-compare-write at SERIAL,
	// whose Paxos rounds complete any commit that reached fewer replicas,
	// so Consistency never decides who holds a name; it decides when a
	// change is acknowledged and what List shows:
	//
	//   - gocql.Quorum (default): a quorum of all replicas, every data
	//     centre counted, acknowledges each commit, and List at QUORUM sees
	//     every acknowledged change.
	//   - gocql.LocalQuorum (needs LocalDC): a quorum of the local data
	//     centre's replicas acknowledges the commit, saving one round trip
	//     between data centres per change; the other data centres get it
	//     a little later (and any serial read completes it there), so List
	//     may show rows changed from another data centre moments ago in
	//     their previous state. Each data centre with hosts needs 3
	//     replicas to go on with one of its nodes down.
	//   - gocql.EachQuorum: a quorum in every data centre acknowledges
	//     each commit (the keyspace must use NetworkTopologyStrategy, which
	//     NewRegistry checks): List sees every change from any data centre,
	//     but one data centre without a quorum stops every change.
	//
	// Others are refused: ONE, TWO, THREE and LOCAL_ONE would let List
	// miss acknowledged changes, ALL stops every change while any one
	// replica is down, and SERIAL and LOCAL_SERIAL are not commit
	// consistencies. ANY cannot be asked for: gocql.Any is this field's
	// zero value, which means QUORUM; ParseConsistency (so ConfigFromEnv
	// and snapctl) refuses the word "any".
	Consistency gocql.Consistency
	// SerialConsistency is the consistency of the Paxos phases of LWTs and
	// of serial reads, which decide who holds a name: gocql.Serial, a
	// quorum of all replicas of every data centre, is the only one
	// accepted (0 means Serial). gocql.LocalSerial is refused with an
	// error wrapping ErrLocalSerial: names are global, and LOCAL_SERIAL
	// serialises only the hosts of one data centre, so two data centres
	// cut off from each other could both win one name.
	SerialConsistency gocql.Consistency

	// LocalDC, when set, is this host's data centre: statements go to the
	// nodes of that data centre first (token-aware: to a replica of the
	// row's name among them), and to other data centres only when none of
	// its nodes is up. LocalQuorum requires it. NewRegistry refuses a
	// LocalDC the cluster does not have (as listed in system.local and
	// system.peers), which would silently send everything to other data
	// centres.
	LocalDC string

	// AllowFragileReplication lets NewRegistry and CreateSchema create the
	// keyspace with a replication that cannot survive the loss of one node
	// (see ErrFragileReplication), for example one replica on a cluster of
	// several nodes that are being set up. Without it that is refused
	// before anything is created. It changes nothing for a keyspace that
	// exists; snapctl check-names reports such a keyspace.
	AllowFragileReplication bool

	// Logger receives notices (unknown outcomes and how they were resolved,
	// take-overs, the driver's own messages). Default: discarded.
	Logger *slog.Logger
}

// identRE is the rule for keyspace and table names.
var identRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// dcRE is the rule for data-centre names in the replication map and LocalDC.
var dcRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$`)

func (cfg *Config) keyspace() string {
	if cfg.Keyspace == "" {
		return DefaultKeyspace
	}
	return cfg.Keyspace
}

func (cfg *Config) table() string {
	if cfg.Table == "" {
		return DefaultTable
	}
	return cfg.Table
}

// replication returns the replication map to create the keyspace with.
func (cfg *Config) replication() map[string]string {
	if len(cfg.Replication) == 0 {
		return map[string]string{"class": "SimpleStrategy", "replication_factor": "1"}
	}
	return cfg.Replication
}

func invalidConfig(format string, args ...any) error {
	return fmt.Errorf("snapid: %w: Cassandra registry: %s", registry.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// Validate checks cfg without connecting. NewRegistry calls it
// first; errors wrap registry.ErrInvalidOption (and ErrLocalSerial for
// LOCAL_SERIAL). What depends on the cluster (LocalDC among its data
// centres, EACH_QUORUM on a NetworkTopologyStrategy keyspace, a
// replication to create that survives the loss of one node) is checked by
// NewRegistry and CreateSchema once connected, before anything is created.
func (cfg *Config) Validate() error {
	_, err := cfg.cluster()
	return err
}

// cluster validates cfg and builds the gocql configuration.
func (cfg *Config) cluster() (*gocql.ClusterConfig, error) {
	if err := cfg.checkFields(); err != nil {
		return nil, err
	}
	cons, err := cfg.consistency()
	if err != nil {
		return nil, err
	}
	serial, err := cfg.serialConsistency()
	if err != nil {
		return nil, err
	}
	tlsConfig, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	return cfg.newCluster(cons, serial, tlsConfig), nil
}

// checkFields checks cfg's hosts, keyspace and table names, replication,
// credentials, timeouts and local data centre, in that order.
func (cfg *Config) checkFields() error {
	if err := cfg.checkHosts(); err != nil {
		return err
	}
	if err := cfg.checkNames(); err != nil {
		return err
	}
	if _, err := replicationCQL(cfg.Replication); err != nil {
		return err
	}
	if cfg.Password != "" && cfg.Username == "" {
		return invalidConfig("a password without a user name")
	}
	if cfg.Timeout < 0 || cfg.ConnectTimeout < 0 || cfg.ReconnectInterval < 0 {
		return invalidConfig("negative timeout")
	}
	if cfg.LocalDC != "" && !dcRE.MatchString(cfg.LocalDC) {
		return invalidConfig("local data centre %q is not a valid data-centre name", cfg.LocalDC)
	}
	return nil
}

// checkHosts checks that cfg has hosts and that each is host[:port].
func (cfg *Config) checkHosts() error {
	if len(cfg.Hosts) == 0 {
		return invalidConfig("no Cassandra hosts given (want host[:port], for example 127.0.0.1:9042)")
	}
	for _, h := range cfg.Hosts {
		if err := checkHost(h); err != nil {
			return err
		}
	}
	return nil
}

// checkNames checks the keyspace and table names (defaults included): CQL
// identifiers, and no keyspace of Cassandra's own.
func (cfg *Config) checkNames() error {
	ks, tbl := cfg.keyspace(), cfg.table()
	if !identRE.MatchString(ks) {
		return invalidConfig("keyspace %q: a keyspace name must match ^[a-z][a-z0-9_]{0,47}$", ks)
	}
	if strings.HasPrefix(ks, "system") {
		return invalidConfig("keyspace %q: names starting with \"system\" belong to Cassandra", ks)
	}
	if !identRE.MatchString(tbl) {
		return invalidConfig("table %q: a table name must match ^[a-z][a-z0-9_]{0,47}$", tbl)
	}
	return nil
}

// consistency returns the commit consistency cfg asks for (QUORUM by
// default), refusing the levels the registry cannot work with. gocql.Any
// is the zero value, the default: a Config cannot ask for ANY (snapctl
// and ConfigFromEnv refuse the word, see ParseConsistency).
func (cfg *Config) consistency() (gocql.Consistency, error) {
	cons := cfg.Consistency
	if cons == gocql.Any { // the zero value: default
		cons = gocql.Quorum
	}
	if why := consistencyRefusal(cons); why != "" {
		return 0, invalidConfig("consistency %v: %s; use QUORUM (default), LOCAL_QUORUM or EACH_QUORUM", cons, why)
	}
	if cons == gocql.LocalQuorum && cfg.LocalDC == "" {
		return 0, invalidConfig("consistency LOCAL_QUORUM needs LocalDC (the data centre whose quorum acknowledges each change)")
	}
	return cons, nil
}

// consistencyRefusal says why the registry cannot use commit consistency
// cons; "" if it can (QUORUM, LOCAL_QUORUM, EACH_QUORUM).
func consistencyRefusal(cons gocql.Consistency) string {
	switch cons {
	case gocql.Quorum, gocql.LocalQuorum, gocql.EachQuorum:
		return ""
	case gocql.All:
		return "every claim, extension and release would fail while any one replica is down"
	case gocql.Any:
		return "a commit at ANY is acknowledged once a node keeps a hint of it, on no replica at all, and check-names' listing cannot read at ANY"
	case gocql.Serial, gocql.LocalSerial:
		return "it is a serial consistency (Config.SerialConsistency), not one of a commit"
	}
	return "fewer replicas than a quorum would let check-names miss acknowledged changes"
}

// serialConsistency returns the serial consistency cfg asks for (SERIAL
// by default); LOCAL_SERIAL is refused with ErrLocalSerial.
func (cfg *Config) serialConsistency() (gocql.Consistency, error) {
	serial := cfg.SerialConsistency
	switch serial {
	case 0:
		serial = gocql.Serial
	case gocql.Serial:
	case gocql.LocalSerial:
		return 0, fmt.Errorf("snapid: %w: Cassandra registry: serial consistency LOCAL_SERIAL refused: %w: node names are global, and "+
			"LOCAL_SERIAL serialises only the hosts of one data centre, so two data centres cut off from each other could both "+
			"win the same name and issue the same ids; use SERIAL (the default)", registry.ErrInvalidOption, ErrLocalSerial)
	default:
		return 0, invalidConfig("serial consistency %v: use SERIAL (the default; LOCAL_SERIAL is refused for node names)", serial)
	}
	return serial, nil
}

// newCluster builds the gocql configuration of the validated cfg with
// consistencies cons and serial and, when set, TLS.
func (cfg *Config) newCluster(cons, serial gocql.Consistency, tlsConfig *tls.Config) *gocql.ClusterConfig {
	cluster := gocql.NewCluster(cfg.Hosts...)
	cluster.Port = DefaultPort
	cluster.ProtoVersion = 4 // the registry's statements need nothing of v5
	cluster.Timeout = cmpOr(cfg.Timeout, DefaultTimeout)
	cluster.ConnectTimeout = cmpOr(cfg.ConnectTimeout, DefaultConnectTimeout)
	cluster.ReconnectInterval = cmpOr(cfg.ReconnectInterval, DefaultReconnectInterval)
	cluster.Consistency = cons
	cluster.SerialConsistency = serial
	cluster.RetryPolicy = nil // no retry policy: see the package documentation
	cluster.MaxWaitSchemaAgreement = cluster.Timeout * 5
	// Token-aware routing needs the keyspaces' replication only; the
	// tables' metadata is never read through the driver.
	cluster.Metadata.CacheMode = gocql.KeyspaceOnly
	// A statement goes to its row's replicas in ring order (the primary
	// replica first), not shuffled.
	if cfg.LocalDC != "" {
		cluster.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(cfg.LocalDC), gocql.DoNotShuffleReplicas())
	} else {
		cluster.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy(), gocql.DoNotShuffleReplicas())
	}
	if cfg.Username != "" {
		cluster.Authenticator = gocql.PasswordAuthenticator{Username: cfg.Username, Password: cfg.Password}
	}
	if tlsConfig != nil {
		cluster.SslOpts = &gocql.SslOptions{Config: tlsConfig, EnableHostVerification: !tlsConfig.InsecureSkipVerify}
	}
	return cluster
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func checkHost(h string) error {
	if h == "" || strings.ContainsAny(h, " \t\r\n,") {
		return invalidConfig("host %q: want host[:port], one per entry", h)
	}
	host, port := h, ""
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			return invalidConfig("host %q: %v", h, err)
		}
	}
	if host == "" {
		return invalidConfig("host %q: empty host name", h)
	}
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return invalidConfig("host %q: port %q is not a number from 1 to 65535", h, port)
		}
	}
	return nil
}

// replicationCQL validates a replication map and renders it as a CQL map
// literal (it cannot be bound in CREATE KEYSPACE).
func replicationCQL(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{'class': 'SimpleStrategy', 'replication_factor': '1'}", nil
	}
	class := m["class"]
	short := strings.TrimPrefix(class, "org.apache.cassandra.locator.")
	keys := sortedKeys(m)
	switch short {
	case "SimpleStrategy":
		if err := checkSimpleReplication(m, keys); err != nil {
			return "", err
		}
	case "NetworkTopologyStrategy":
		if err := checkTopologyReplication(m, keys); err != nil {
			return "", err
		}
	case "":
		return "", invalidConfig("replication: no class (want SimpleStrategy or NetworkTopologyStrategy)")
	default:
		return "", invalidConfig("replication class %q: want SimpleStrategy or NetworkTopologyStrategy", class)
	}
	return renderReplication(m, short, keys)
}

// checkSimpleReplication checks the keys (m's, sorted) of a SimpleStrategy
// replication m: replication_factor, and nothing else but the class.
func checkSimpleReplication(m map[string]string, keys []string) error {
	for _, k := range keys {
		if k != "class" && k != "replication_factor" {
			return invalidConfig("replication: SimpleStrategy takes only replication_factor, not %q", k)
		}
	}
	if _, ok := m["replication_factor"]; !ok {
		return invalidConfig("replication: SimpleStrategy needs replication_factor")
	}
	return nil
}

// checkTopologyReplication checks the keys (m's, sorted) of a
// NetworkTopologyStrategy replication m: at least one factor, each under a
// data-centre name (or replication_factor).
func checkTopologyReplication(m map[string]string, keys []string) error {
	if len(m) == 1 {
		return invalidConfig("replication: NetworkTopologyStrategy needs a factor per data centre (or replication_factor)")
	}
	for _, k := range keys {
		if k != "class" && !dcRE.MatchString(k) {
			return invalidConfig("replication: %q is not a data-centre name", k)
		}
	}
	return nil
}

// renderReplication renders replication m, of class short, as a CQL map
// literal, its keys in the order of keys (m's, sorted), checking each
// factor.
func renderReplication(m map[string]string, short string, keys []string) (string, error) {
	var b strings.Builder
	b.WriteString("{'class': '" + short + "'")
	for _, k := range keys {
		if k == "class" {
			continue
		}
		if err := checkFactor(k, m[k]); err != nil {
			return "", err
		}
		b.WriteString(", '" + k + "': '" + m[k] + "'")
	}
	b.WriteString("}")
	return b.String(), nil
}

// checkFactor checks replication factor v (of key k): a whole number from
// 1 to 99, written plainly.
func checkFactor(k, v string) error {
	if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 99 || strconv.Itoa(n) != v {
		return invalidConfig("replication %q: %q is not a replication factor (a whole number from 1 to 99)", k, v)
	}
	return nil
}

// slogLogger adapts slog to gocql's logger interface. gocql's errors and
// warnings (a control connection lost, a node down, a peer it cannot use)
// are warnings, each message prefixed "gocql: " and its fields as
// attributes; its informational and debugging messages (every host added,
// every reconnection attempt) are debug records.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) log(level slog.Level, msg string, fields []gocql.LogField) {
	ctx := context.Background()
	if !s.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, len(fields))
	for i, f := range fields {
		attrs[i] = slog.Any(f.Name, f.Value.Any())
	}
	s.l.LogAttrs(ctx, level, "gocql: "+msg, attrs...)
}

func (s slogLogger) Error(msg string, fields ...gocql.LogField)   { s.log(slog.LevelWarn, msg, fields) }
func (s slogLogger) Warning(msg string, fields ...gocql.LogField) { s.log(slog.LevelWarn, msg, fields) }
func (s slogLogger) Info(msg string, fields ...gocql.LogField)    { s.log(slog.LevelDebug, msg, fields) }
func (s slogLogger) Debug(msg string, fields ...gocql.LogField)   { s.log(slog.LevelDebug, msg, fields) }
