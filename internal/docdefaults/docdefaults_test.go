package docdefaults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ got, want string }{
		{Duration(20 * time.Millisecond), "20 ms"},
		{Duration(15 * time.Second), "15 seconds"},
		{Duration(time.Second), "1 second"},
		{Duration(time.Minute), "1 minute"},
		{Duration(5 * time.Minute), "5 minutes"},
		{Duration(2 * time.Hour), "2 hours"},
		{Duration(90 * time.Second), "90 seconds"},
		{Duration(2500 * time.Millisecond), "2.5 s"},
		{Short(10 * time.Millisecond), "10 ms"},
		{Short(time.Second), "1 s"},
		{Count(1000, "numbers"), "1,000 numbers"},
		{Count(999, ""), "999"},
		{Thousands(1234567), "1,234,567"},
		{Thousands(0), "0"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "defaults.md")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rows, err := Load(write("| key | default |\n|---|---|\n| <a id=\"lib.a\"></a>`lib.a` | 1,000 numbers | x |\n| not a row | 3 |\n"))
	if err != nil || len(rows) != 1 || rows[0] != (Row{Key: "lib.a", Value: "1,000 numbers", Line: 3}) {
		t.Fatalf("Load = %+v, %v; want the one anchored row", rows, err)
	}
	if _, err := Load(write("| <a id=\"lib.a\"></a> | 1 |\n| <a id=\"lib.a\"></a> | 2 |\n")); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("a key twice: %v; want an error naming the first row", err)
	}
	if _, err := Load(write("no table\n")); err == nil {
		t.Error("a file without rows: no error")
	}
}
