package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/testcluster"
	snapidprom "github.com/snapid/snapid/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestServer(t *testing.T) (*httptest.Server, *snapid.Generator) {
	t.Helper()
	// Each test's server is a host of its own: its own place for the
	// records of names.
	g, err := snapid.Open(filepath.Join(t.TempDir(), "counter.u64"), "web_1", snapid.Config{NoSync: true, BindingDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(snapidprom.NewCollector(g, snapidprom.Opts{}))
	srv := httptest.NewServer(newServer(g, metrics))
	t.Cleanup(srv.Close)
	return srv, g
}

func post(t *testing.T, url, body string) (int, article) {
	t.Helper()
	resp, err := http.Post(url+"/articles", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var a article
	if resp.StatusCode == http.StatusCreated {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
	}
	return resp.StatusCode, a
}

// Articles get unique ids from the Generator, concurrently; bad requests
// take none; the metrics count them.
func TestArticles(t *testing.T) {
	srv, g := newTestServer(t)
	var wg sync.WaitGroup
	ids := make([]string, 20)
	codes := make([]int, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(srv.URL+"/articles", "application/json", strings.NewReader(`{"title":"t"}`))
			if err != nil {
				return
			}
			defer resp.Body.Close()
			codes[i] = resp.StatusCode
			var a article
			if json.NewDecoder(resp.Body).Decode(&a) == nil {
				ids[i] = a.ID
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, id := range ids {
		require.Equal(t, http.StatusCreated, codes[i])
		_, err := snapid.ParseID(id)
		require.NoError(t, err)
		require.False(t, seen[id], "%s twice", id)
		seen[id] = true
	}

	for _, bad := range []string{"", "{}", `{"title":`, `[1]`} {
		code, _ := post(t, srv.URL, bad)
		assert.Equal(t, http.StatusBadRequest, code, "%q", bad)
	}
	assert.Equal(t, uint64(20), g.Stats().IDsIssued, "bad requests take no id")

	code, a := post(t, srv.URL, `{"title":"Hello","body":"World"}`)
	require.Equal(t, http.StatusCreated, code)
	assert.Equal(t, "web_1-21", a.ID)
	resp, err := http.Get(srv.URL + "/articles/" + a.ID)
	require.NoError(t, err)
	var got article
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	assert.Equal(t, a, got)
	resp, err = http.Get(srv.URL + "/articles/web_1-999")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	resp, err = http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(b), `snapid_ids_issued_total{form="name",name="web_1"} 21`)
}

// A request whose client has gone takes no id and gets 503.
func TestArticleClientGone(t *testing.T) {
	srv, g := newTestServer(t)
	_ = srv
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/articles", strings.NewReader(`{"title":"t"}`))
	w := httptest.NewRecorder()
	newServer(g, prometheus.NewRegistry()).ServeHTTP(w, req)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Contains(t, w.Body.String(), "gave up")
	assert.Equal(t, uint64(0), g.Stats().IDsIssued)
}

// The built binary, with the registry on the real Cassandra: it serves
// articles, and on SIGTERM closes the Generator, which returns the unused
// reservation (the registry's mark is back at the counter).
func TestBinarySIGTERM(t *testing.T) {
	k := testcluster.NewKeyspace(t)
	bin := filepath.Join(t.TempDir(), "cmsserver")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	counter := filepath.Join(t.TempDir(), "counter.u64")
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SNAPID_COUNTER="+counter, "SNAPID_NAME=web_1", "SNAPID_BINDING_DIR="+t.TempDir(),
		"SNAPID_CASSANDRA="+strings.Join(k.Hosts, ","), "SNAPID_KEYSPACE="+k.Name)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var url string
	var log []string
	deadline := time.After(60 * time.Second)
	for url == "" {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the server ended: %v", log)
			log = append(log, l)
			if m := regexp.MustCompile(`url=(http://\S+)`).FindStringSubmatch(l); m != nil {
				url = m[1]
			}
		case <-deadline:
			t.Fatalf("the server did not start: %v", log)
		}
	}
	for i := 1; i <= 3; i++ {
		code, a := post(t, url, `{"title":"t"}`)
		require.Equal(t, http.StatusCreated, code)
		assert.Equal(t, "web_1-"+string(rune('0'+i)), a.ID)
	}

	reg, err := cassandra.NewRegistry(context.Background(), cassandra.Config{Hosts: k.Hosts, Keyspace: k.Name, NoCreate: true})
	require.NoError(t, err)
	defer reg.Close()
	h, err := reg.Get(context.Background(), "web_1")
	require.NoError(t, err)
	require.Greater(t, h.Reserved, uint64(3), "a reservation is held while the server runs")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waited := make(chan error, 1)
	go func() {
		for l := range lines {
			log = append(log, l)
		}
		waited <- cmd.Wait()
	}()
	select {
	case err := <-waited:
		require.NoError(t, err, "exit status after SIGTERM: %v", log)
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit after SIGTERM: %v", log)
	}
	assert.Contains(t, strings.Join(log, "\n"), "generator closed")
	h, err = reg.Get(context.Background(), "web_1")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), h.Reserved, "the unused reservation was returned")
	v, err := admin.ReadCounter(counter)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), v)
}
