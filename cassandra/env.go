package cassandra

import (
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/envvars"
	"github.com/snapid/snapid/registry"
)

// The environment variables ConfigFromEnv reads: the same for snapctl (whose
// flags override them) and for a program embedding the registry.
const (
	EnvHosts             = "SNAPID_CASSANDRA"          // host[:port],…; none: no registry
	EnvKeyspace          = "SNAPID_KEYSPACE"           // default snapid
	EnvUsername          = "SNAPID_CASSANDRA_USERNAME" // password authentication
	EnvPassword          = "SNAPID_CASSANDRA_PASSWORD" // the user's password (never a flag)
	EnvTLSCA             = "SNAPID_CASSANDRA_TLS_CA"   // PEM CA file
	EnvTLSCert           = "SNAPID_CASSANDRA_TLS_CERT" // PEM client certificate
	EnvTLSKey            = "SNAPID_CASSANDRA_TLS_KEY"  // PEM client key
	EnvLocalDC           = "SNAPID_LOCAL_DC"           // this host's data centre
	EnvConsistency       = "SNAPID_CONSISTENCY"        // quorum, local_quorum or each_quorum
	EnvSerialConsistency = "SNAPID_SERIAL_CONSISTENCY" // serial
	EnvReplication       = "SNAPID_REPLICATION"        // dc1:3,dc2:3 or 3, if the keyspace is created
)

// EnvError is a variable ConfigFromEnv could not read: Key is the
// variable, Value what it held, Want what is expected. It wraps
// registry.ErrInvalidOption.
type EnvError struct {
	Key, Value, Want string
}

func (e *EnvError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s is not set: %s", e.Key, e.Want)
	}
	return fmt.Sprintf("%s=%q: %s", e.Key, e.Value, e.Want)
}

// Unwrap makes errors.Is(err, registry.ErrInvalidOption) hold.
func (e *EnvError) Unwrap() error { return registry.ErrInvalidOption }

// ConfigFromEnv builds a Config from the variables above, read with
// lookup (os.Getenv, or a function that puts command-line flags before
// the environment). ok is false when no hosts are given (EnvHosts empty):
// no registry. EnvHosts set to blanks, or with an empty entry ("db1,,db3",
// "db1,"), is an *EnvError, not "no registry": it is a host list whose
// hosts went missing (a template's variable left unset), and a host that
// meant to use the registry would run without it. A value it cannot read
// is an *EnvError naming the variable; the rest is judged by
// Config.Validate and NewRegistry. A user name without EnvPassword is
// refused: the password comes only from that variable, and without it
// every connection would fail authentication. It reads nothing else and
// is safe for concurrent use if lookup is. A misspelt variable is not
// read at all: WarnUnknownEnv reports those.
func ConfigFromEnv(lookup func(key string) string) (cfg Config, ok bool, err error) {
	hosts := lookup(EnvHosts)
	if hosts == "" {
		return cfg, false, nil
	}
	if cfg.Hosts, err = parseHosts(hosts); err != nil {
		return cfg, true, err
	}
	cfg.Keyspace = strings.TrimSpace(lookup(EnvKeyspace))
	cfg.Username = lookup(EnvUsername)
	cfg.Password = lookup(EnvPassword)
	if cfg.Username != "" && cfg.Password == "" {
		return cfg, true, &EnvError{Key: EnvPassword, Want: fmt.Sprintf("user %q needs a password, read only from %s: export it (the password never goes on the command line)", cfg.Username, EnvPassword)}
	}
	cfg.TLSCAFile = lookup(EnvTLSCA)
	cfg.TLSCertFile = lookup(EnvTLSCert)
	cfg.TLSKeyFile = lookup(EnvTLSKey)
	cfg.LocalDC = strings.TrimSpace(lookup(EnvLocalDC))
	if cfg.Consistency, err = ParseConsistency(lookup(EnvConsistency)); err != nil {
		return cfg, true, &EnvError{Key: EnvConsistency, Value: lookup(EnvConsistency), Want: err.Error()}
	}
	if cfg.SerialConsistency, err = ParseSerialConsistency(lookup(EnvSerialConsistency)); err != nil {
		return cfg, true, &EnvError{Key: EnvSerialConsistency, Value: lookup(EnvSerialConsistency), Want: err.Error()}
	}
	if spec := lookup(EnvReplication); strings.TrimSpace(spec) != "" {
		if cfg.Replication, err = ParseReplication(spec); err != nil {
			return cfg, true, &EnvError{Key: EnvReplication, Value: spec, Want: err.Error()}
		}
	}
	return cfg, true, nil
}

// parseHosts reads EnvHosts's value, host[:port],…, refusing a value of
// blanks only and an empty entry.
func parseHosts(hosts string) ([]string, error) {
	if strings.TrimSpace(hosts) == "" {
		return nil, &EnvError{Key: EnvHosts, Value: hosts,
			Want: "blank: want host[:port],… (to run without a registry, unset it or set it to nothing)"}
	}
	var out []string
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h == "" {
			return nil, &EnvError{Key: EnvHosts, Value: hosts,
				Want: "an empty entry between commas (a host missing from the list?): want host[:port],… with no empty entry"}
		}
		out = append(out, h)
	}
	return out, nil
}

// WarnUnknownEnv logs a warning on log for each variable of environ
// (os.Environ's form, "KEY=value") whose name starts with SNAPID_, in any
// case, but that no snapid program reads, naming the variable it likely
// misspells: ConfigFromEnv reads only the names it knows, so a misspelt
// EnvHosts leaves a host without its registry, silently. Values are never
// logged. A program configured from its environment calls it once, with
// os.Environ(), beside ConfigFromEnv. It returns the names warned about.
func WarnUnknownEnv(log *slog.Logger, environ []string) []string {
	var names []string
	for _, v := range envvars.Unknown(environ) {
		names = append(names, v.Name)
		if log == nil {
			continue
		}
		if v.Closest != "" {
			log.Warn(fmt.Sprintf("snapid: ignoring %s: no snapid program reads it; did you mean %s?", v.Name, v.Closest))
		} else {
			log.Warn(fmt.Sprintf("snapid: ignoring %s: no snapid program reads it", v.Name))
		}
	}
	return names
}

// ParseConsistency reads a commit consistency's name in any case, "-" or
// "_" between words; "" is the default (QUORUM). Only quorum,
// local_quorum and each_quorum are accepted: any other level's name is
// refused, saying why (ANY in particular, which Config cannot tell from
// its zero value, the default).
func ParseConsistency(s string) (gocql.Consistency, error) {
	s = strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if s == "" {
		return 0, nil
	}
	cons, err := gocql.ParseConsistencyWrapper(s)
	if err != nil || cons == gocql.Serial || cons == gocql.LocalSerial {
		return 0, fmt.Errorf("want quorum (the default), local_quorum or each_quorum")
	}
	if why := consistencyRefusal(cons); why != "" {
		return 0, fmt.Errorf("%s is refused (%s): want quorum (the default), local_quorum or each_quorum", strings.ToLower(s), why)
	}
	return cons, nil
}

// ParseSerialConsistency reads a serial consistency: serial, or
// local_serial, which Config.Validate refuses with the reason; "" is the
// default (SERIAL).
func ParseSerialConsistency(s string) (gocql.Consistency, error) {
	switch strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_")) {
	case "":
		return 0, nil
	case "SERIAL":
		return gocql.Serial, nil
	case "LOCAL_SERIAL":
		return gocql.LocalSerial, nil
	}
	return 0, fmt.Errorf("the only one is serial")
}

// replicationDCRE is the rule for data-centre names in a replication spec.
var replicationDCRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$`)

// ParseReplication turns a replication spec into a keyspace's replication
// map: "dc1:3,dc2:3" is NetworkTopologyStrategy with a factor per data
// centre, a bare "3" is SimpleStrategy with that factor. An empty spec is
// an error (want …).
func ParseReplication(spec string) (map[string]string, error) {
	const want = "want dc1:3,dc2:3 (NetworkTopologyStrategy, a factor per data centre) or a bare factor such as 3 (SimpleStrategy)"
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("no replication given: %s", want)
	}
	factor := func(s string) (string, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 99 || strconv.Itoa(n) != s {
			return "", fmt.Errorf("%q is not a replication factor (a whole number from 1 to 99); %s", s, want)
		}
		return s, nil
	}
	if !strings.Contains(spec, ":") {
		f, err := factor(spec)
		if err != nil {
			return nil, err
		}
		return map[string]string{"class": "SimpleStrategy", "replication_factor": f}, nil
	}
	m := map[string]string{"class": "NetworkTopologyStrategy"}
	for _, part := range strings.Split(spec, ",") {
		dc, n, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("%q has no data centre; %s", part, want)
		}
		if !replicationDCRE.MatchString(dc) || dc == "class" || dc == "replication_factor" {
			return nil, fmt.Errorf("%q is not a data-centre name; %s", dc, want)
		}
		if _, dup := m[dc]; dup {
			return nil, fmt.Errorf("data centre %q given twice", dc)
		}
		f, err := factor(n)
		if err != nil {
			return nil, err
		}
		m[dc] = f
	}
	return m, nil
}
