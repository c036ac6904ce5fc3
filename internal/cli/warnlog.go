package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// lineHandler is the slog.Handler snapctl gives the library (WithLogger):
// each record becomes one line on stderr, "snapctl: warning: <message>
// (key=value, …)" for warnings, "snapctl: error: …" for errors and
// "snapctl: notice: …" below; debug records are dropped. The library's
// "snapid: " prefix is left out.
type lineHandler struct {
	w      io.Writer
	attrs  []slog.Attr
	prefix string // the open groups, "a.b."
}

func newLineHandler(w io.Writer) *lineHandler { return &lineHandler{w: w} }

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	kind := "notice"
	switch {
	case r.Level >= slog.LevelError:
		kind = "error"
	case r.Level >= slog.LevelWarn:
		kind = "warning"
	}
	var b strings.Builder
	b.WriteString("snapctl: ")
	b.WriteString(kind)
	b.WriteString(": ")
	b.WriteString(oneLine(strings.TrimPrefix(r.Message, "snapid: ")))
	var parts []string
	add := func(prefix string, a slog.Attr) {
		if a.Equal(slog.Attr{}) {
			return
		}
		parts = append(parts, prefix+a.Key+"="+oneLine(a.Value.Resolve().String()))
	}
	for _, a := range h.attrs {
		add("", a)
	}
	r.Attrs(func(a slog.Attr) bool { add(h.prefix, a); return true })
	if len(parts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	b.WriteByte('\n')
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		a.Key = h.prefix + a.Key
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// lockedWriter serialises writes to w: the library logs from background
// goroutines while a command writes to the same stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// jsonHelp is the help of every --json flag.
const jsonHelp = "print JSON; numbers, marks and counts of ids are strings (\"10\"), since they may pass 2^53, which JSON readers lose"
