package statefile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var errEOF = io.EOF

// Lock takes an exclusive flock on fd, waiting at most as long as ctx
// allows: it polls with LOCK_NB, backing off from 1 ms to 50 ms. When ctx
// ends first it returns an error wrapping ErrLocked and ctx's error that
// names the holder (see Holder). The back-off's pauses are real; how
// long the wait lasts is ctx's to say (package snapid derives it from its
// Generator's clock).
func Lock(ctx context.Context, fd int, path string) error {
	return lock(ctx, fd, path, unix.LOCK_EX)
}

// LockShared is Lock for a shared flock.
func LockShared(ctx context.Context, fd int, path string) error {
	return lock(ctx, fd, path, unix.LOCK_SH)
}

func lock(ctx context.Context, fd int, path string, how int) error {
	wait := time.Millisecond
	for {
		err := ignoringEINTR(func() error { return unix.Flock(fd, how|unix.LOCK_NB) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return &os.PathError{Op: "lock", Path: path, Err: err}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &LockedError{Path: path, Holder: Holder(fd), Cause: context.Cause(ctx)}
		case <-t.C:
		}
		if wait *= 2; wait > 50*time.Millisecond {
			wait = 50 * time.Millisecond
		}
	}
}

// Holder describes the processes holding a flock on the file open at fd,
// from /proc/locks and /proc/<pid>/status: "held by pid 123 (snapctl, user
// nobody)"; "holder unknown" if it cannot be told.
func Holder(fd int) string {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return "holder unknown"
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return "holder unknown"
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	var holders []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		holders = append(holders, describePid(pid))
	}
	if len(holders) == 0 {
		return "holder unknown"
	}
	return "held by " + strings.Join(holders, ", ")
}

// describePid names a process: "pid 123 (snapctl, user nobody)".
func describePid(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "pid " + strconv.Itoa(pid)
	}
	var comm, user string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Name:"); ok {
			comm = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				if uid, err := strconv.ParseUint(f[0], 10, 32); err == nil {
					user = UserName(uint32(uid))
				}
			}
		}
	}
	return fmt.Sprintf("pid %d (%s, user %s)", pid, comm, user)
}

// HolderOf is Holder for the file at path (opened without following a
// link, without blocking, and closed again).
func HolderOf(path string) string {
	fd, err := openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return "holder unknown"
	}
	defer unix.Close(fd)
	return Holder(fd)
}
