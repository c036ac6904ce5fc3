package cassandra

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/docdefaults"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocsDefaults compares the registry adapter's rows of
// docs/reference/defaults.md (the one table every doc quoting a default
// links to) with the adapter's defaults.
func TestDocsDefaults(t *testing.T) {
	docdefaults.Check(t, filepath.Join("..", docdefaults.Path), "cassandra.", map[string]string{
		"cassandra.keyspace":         DefaultKeyspace,
		"cassandra.timeout":          docdefaults.Duration(DefaultTimeout),
		"cassandra.port":             fmt.Sprint(DefaultPort),
		"cassandra.read-retry-waits": docdefaults.Short(readRetryBase) + " to " + docdefaults.Short(readRetryCap),
	})
}

// The driver's errors and warnings reach the configured logger as
// warnings, prefixed "gocql: ", with their fields as attributes; its
// informational and debugging messages as debug records.
func TestDriverMessagesReachSlog(t *testing.T) {
	for _, tc := range []struct {
		name  string
		log   func(l gocql.StructuredLogger, msg string, fields ...gocql.LogField)
		level slog.Level
	}{
		{"error", gocql.StructuredLogger.Error, slog.LevelWarn},
		{"warning", gocql.StructuredLogger.Warning, slog.LevelWarn},
		{"info", gocql.StructuredLogger.Info, slog.LevelDebug},
		{"debug", gocql.StructuredLogger.Debug, slog.LevelDebug},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slogLogger{slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			tc.log(l, "Node is DOWN.", gocql.NewLogFieldIP("host_addr", net.IPv4(127, 0, 0, 2)), gocql.NewLogFieldInt("port", 9042),
				gocql.NewLogFieldBool("up", false))
			var rec map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
			assert.Equal(t, tc.level.String(), rec["level"])
			assert.Equal(t, "gocql: Node is DOWN.", rec["msg"])
			assert.Equal(t, "127.0.0.2", rec["host_addr"])
			assert.Equal(t, float64(9042), rec["port"])
			assert.Equal(t, false, rec["up"])

			// At the default level (info) only warnings are written.
			buf.Reset()
			tc.log(slogLogger{slog.New(slog.NewJSONHandler(&buf, nil))}, "x")
			assert.Equal(t, tc.level >= slog.LevelInfo, buf.Len() > 0, buf.String())
		})
	}
}
