// Command cmsserver is a small CMS-like HTTP server that embeds snapid: it
// gives every article created with POST /articles an id such as
// "web_1-42", serves GET /articles/{id} and the Prometheus metrics on
// /metrics, and closes its Generator on SIGTERM or SIGINT, which returns
// the unused reservation to the registry.
//
// Configuration, from the environment:
//
//	SNAPID_COUNTER    the counter file (default ./cms-counter.u64)
//	SNAPID_NAME       the node name (default: derived from the host name)
//	SNAPID_CASSANDRA  host[:port],… of the registry; none: standalone
//
// and every other registry variable snapctl reads, from the same place
// (cassandra.ConfigFromEnv): SNAPID_KEYSPACE, SNAPID_LOCAL_DC,
// SNAPID_CASSANDRA_USERNAME with SNAPID_CASSANDRA_PASSWORD,
// SNAPID_CASSANDRA_TLS_CA, _TLS_CERT and _TLS_KEY, SNAPID_CONSISTENCY,
// SNAPID_SERIAL_CONSISTENCY and SNAPID_REPLICATION;
//
// and -addr (default 127.0.0.1:8080). Try it:
//
//	go run ./examples/cmsserver &
//	curl -d '{"title":"Hello"}' localhost:8080/articles
//	curl localhost:8080/metrics | grep snapid_
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/cassandra"
	snapidprom "github.com/snapid/snapid/prometheus"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cassandra.WarnUnknownEnv(log, os.Environ()) // a misspelt SNAPID_ variable is never read
	if err := run(ctx, *addr, os.Getenv, log); err != nil {
		log.Error("cmsserver", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts the server down and closes the
// Generator, then the registry (the Generator returns its reservation
// through the registry, so the registry is closed last).
func run(ctx context.Context, addr string, getenv func(string) string, log *slog.Logger) (err error) {
	path := getenv("SNAPID_COUNTER")
	if path == "" {
		path = "cms-counter.u64"
	}
	name := getenv("SNAPID_NAME")
	if name == "" {
		host, herr := os.Hostname()
		if herr != nil {
			return herr
		}
		if name, _, err = snapid.NameFromHostname(host); err != nil {
			return err
		}
	}
	gcfg := snapid.Config{Logger: log}
	cfg, ok, err := registryConfig(getenv, log)
	if err != nil {
		return err
	}
	if ok {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		reg, rerr := cassandra.NewRegistry(rctx, cfg)
		cancel()
		if rerr != nil {
			return rerr
		}
		defer reg.Close() // last: after the Generator has returned its reservation
		gcfg.Registry = &snapid.RegistryConfig{Registry: reg}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	g, err := snapid.OpenContext(octx, path, name, gcfg)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := g.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the generator: %w", cerr)
		}
		log.Info("generator closed", "name", name)
	}()

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(snapidprom.NewCollector(g, snapidprom.Opts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newServer(g, metrics), ReadHeaderTimeout: 10 * time.Second}
	log.Info("listening", "url", "http://"+ln.Addr().String(), "name", name, "counter", g.Path())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// registryConfig is the registry's configuration from the same variables
// snapctl reads (cassandra.ConfigFromEnv), or ok=false without
// SNAPID_CASSANDRA; the driver's notices go to log.
func registryConfig(getenv func(string) string, log *slog.Logger) (cfg cassandra.Config, ok bool, err error) {
	cfg, ok, err = cassandra.ConfigFromEnv(getenv)
	cfg.Logger = log
	return cfg, ok, err
}

// article is what the server stores.
type article struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Body  string `json:"body,omitempty"`
}

// server is the CMS: articles in memory, ids from g.
type server struct {
	g        *snapid.Generator
	mu       sync.Mutex
	articles map[string]article
}

// newServer returns the HTTP handler: POST /articles, GET /articles/{id},
// GET /metrics.
func newServer(g *snapid.Generator, metrics *prometheus.Registry) http.Handler {
	s := &server{g: g, articles: map[string]article{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /articles", s.create)
	mux.HandleFunc("GET /articles/{id}", s.get)
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	return mux
}

func (s *server) create(w http.ResponseWriter, r *http.Request) {
	var a article
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&a); err != nil || a.Title == "" {
		http.Error(w, "want a JSON object with a title", http.StatusBadRequest)
		return
	}
	// The caller waits at most as long as its request lasts.
	id, err := s.g.UniqueIDContext(r.Context())
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		http.Error(w, "gave up waiting for an id", http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, "no id: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	a.ID = id
	s.mu.Lock()
	s.articles[id] = a
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/articles/"+id)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(a)
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	a, ok := s.articles[r.PathValue("id")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a)
}
