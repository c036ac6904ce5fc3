package hoststate

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NotMounted returns the mount point that /etc/fstab or a systemd mount
// unit of /etc/systemd/system lists at path or above it and that is not
// mounted now ("" if none): a place missing there is hidden by the file
// system under the mount point, not absent, and one made there would be
// lost from view when it is mounted. A host without them, or without
// /proc/self/mountinfo, lists nothing.
func NotMounted(path string) string {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	fstab, _ := os.ReadFile("/etc/fstab")
	points := fstabPoints(fstab)
	units, _ := filepath.Glob("/etc/systemd/system/*.mount")
	for _, u := range units {
		if b, err := os.ReadFile(u); err == nil {
			points = append(points, unitPoints(b)...)
		}
	}
	return notMounted(path, points, mountedPoints(mountinfo))
}

// notMounted is the first of points at path or above it that is not in
// mounted.
func notMounted(path string, points []string, mounted map[string]bool) string {
	path = filepath.Clean(path)
	for _, at := range points {
		at = filepath.Clean(at)
		if !filepath.IsAbs(at) || at == "/" || mounted[at] {
			continue
		}
		if path == at || strings.HasPrefix(path, at+"/") {
			return at
		}
	}
	return ""
}

// fstabPoints returns the mount points an fstab lists (swap left out).
func fstabPoints(b []byte) []string {
	var out []string
	for _, f := range fields(b) {
		if len(f) >= 3 && !strings.HasPrefix(f[0], "#") && f[2] != "swap" {
			out = append(out, unescape(f[1]))
		}
	}
	return out
}

// unitPoints returns the mount point of a systemd mount unit (Where=).
func unitPoints(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		// (systemd takes the spaces around "=" away.)
		if k, v, ok := strings.Cut(l, "="); ok && strings.TrimSpace(k) == "Where" {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}

// mountedPoints returns the mount points of a mountinfo.
func mountedPoints(b []byte) map[string]bool {
	m := map[string]bool{}
	for _, f := range fields(b) {
		if len(f) > 4 {
			m[unescape(f[4])] = true
		}
	}
	return m
}

func fields(b []byte) [][]string {
	var out [][]string
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

// unescape undoes the octal escapes of fstab and mountinfo ("\040" for a
// space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// NotMountedError is the error for a place under mount point at that is
// not mounted.
func NotMountedError(place, at string) error {
	return fmt.Errorf("%s is a mount point (/etc/fstab or a mount unit) not mounted now: the host's records of node names are kept under it (%s), "+
		"and a place made on the file system under it would hide them; mount it first", at, place)
}
