package prometheus_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/testcluster"
	snapidprom "github.com/snapid/snapid/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// proxy forwards TCP connections to target until cut, and again once
// restored, on the same address: the registry seen through it goes away
// and comes back while Cassandra itself keeps running.
type proxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
	wg           sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{addr: ln.Addr().String(), target: target}
	p.serve(ln)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore listens again on the same address.
func (p *proxy) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	require.NoError(t, err)
	p.serve(ln)
}

// With the registry on the real Cassandra behind a proxy: the metrics show
// the registry going away (errors, no contact, the range running out) and
// coming back (the mark extended again).
func TestCollectorCassandraOutage(t *testing.T) {
	k := testcluster.NewKeyspace(t)
	target := k.Hosts[0]
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(target, "9042")
	}
	p := startProxy(t, target)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := cassandra.NewRegistry(ctx, cassandra.Config{Hosts: []string{p.addr}, Keyspace: k.Name,
		Timeout: time.Second, ConnectTimeout: time.Second, ReconnectInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	defer reg.Close()
	g, err := snapid.OpenContext(ctx, filepath.Join(t.TempDir(), "counter.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, ReserveStep: 20, OutageHorizon: -1, Timeout: 2 * time.Second},
		NoSync:     true,
		BindingDir: t.TempDir(),
	})
	require.NoError(t, err)
	defer g.Close()
	c := snapidprom.NewCollector(g, snapidprom.Opts{})
	m := scrape(t, c)
	contact := m["snapid_registry_last_contact_timestamp_seconds"]
	require.Positive(t, contact)

	p.cut()
	for {
		_, err = g.Next()
		if err != nil {
			break
		}
	}
	require.ErrorIs(t, err, snapid.ErrReservationExhausted)
	m = scrape(t, c)
	assert.Positive(t, m["snapid_registry_calls_total{call=extend,outcome=error}"])
	assert.Equal(t, 0.0, m["snapid_reservation_left_numbers"])
	assert.Equal(t, contact, m["snapid_registry_last_contact_timestamp_seconds"], "nothing reached the registry")
	mark := m["snapid_reservation_mark"]

	p.restore(t)
	require.Eventually(t, func() bool {
		_, err := g.Next()
		return err == nil || !errors.Is(err, snapid.ErrReservationExhausted)
	}, time.Minute, 100*time.Millisecond, "issuance resumes once the registry is back")
	m = scrape(t, c)
	assert.Greater(t, m["snapid_reservation_mark"], mark)
	assert.Greater(t, m["snapid_registry_last_contact_timestamp_seconds"], contact)
	assert.Equal(t, 1.0, m["snapid_session_held"])
}
