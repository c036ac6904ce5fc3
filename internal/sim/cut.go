package sim

import (
	"bytes"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// What a power cut leaves of a host's files (see disk), computed from
// the state the disk held at the instant of the cut (diskState), so that
// a cut inside an operation (freeze.go) and one between steps are the
// same model.

// dirBit marks a directory in a listing (name → inode): inodes never use
// the top bit.
const dirBit = 1 << 63

// diskState is a host's disk at one instant: its files as they are
// (what the processes see, the page cache included) and what a power cut
// would keep of them.
type diskState struct {
	now     map[string]map[string]uint64 // directory → name → inode (dirBit: a directory), now
	cur     map[uint64][]byte            // inode → content now
	entries map[string]map[string]uint64 // directory → name → inode, as of its last directory sync
	content map[uint64][]byte            // inode → content as of its last fsync
}

// capture takes the disk's state now.
func (d *disk) capture() (*diskState, error) {
	st := &diskState{now: map[string]map[string]uint64{}, cur: map[uint64][]byte{},
		entries: map[string]map[string]uint64{}, content: map[uint64][]byte{}}
	d.mu.Lock()
	for k, v := range d.entries {
		st.entries[k] = v // replaced whole by a directory sync, never changed in place
	}
	for k, v := range d.content {
		st.content[k] = v
	}
	d.mu.Unlock()
	err := walkTree(d.root, st.now, st.cur)
	return st, err
}

// cutResult is what a power cut at st leaves: every directory and file
// (with its content) that survives. In forget mode every name goes back
// to its directory's last sync (a directory whose entry was never synced
// goes, with all in it) and every file's content to its last fsync. In
// keep-some mode each name, independently, either stays as it is now or
// goes back, and each file whose name stays keeps its content as it is
// now, goes back to its last fsync, or is torn: a prefix of what was
// written since its last fsync reached the disk and the rest did not (a
// counter's 8 bytes or a lease record half old, half new).
func (st *diskState) cutResult(root string, rng *rand.Rand, keepSome bool) (files map[string][]byte, dirs map[string]bool) {
	files, dirs = map[string][]byte{}, map[string]bool{}
	keep := func() bool { return keepSome && rng.IntN(2) == 0 }
	version := func(ino uint64) []byte {
		now := st.cur[ino]
		old, synced := st.content[ino]
		if bytes.Equal(now, old) {
			return now
		}
		switch rng.IntN(3) {
		case 0:
			return now
		case 1:
			if !synced {
				return nil
			}
			return old
		}
		return torn(old, now, rng)
	}
	var walk func(dir string)
	walk = func(dir string) {
		dirs[dir] = true
		now, was := st.now[dir], st.entries[dir]
		names := make([]string, 0, len(now)+len(was))
		for n := range now {
			names = append(names, n)
		}
		for n := range was {
			if _, ok := now[n]; !ok {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			p := filepath.Join(dir, n)
			curIno, present := now[n]
			oldIno, durable := was[n]
			if present && curIno&dirBit != 0 {
				// A directory made and not synced into its parent goes,
				// with everything in it.
				if durable || keep() {
					walk(p)
				}
				continue
			}
			if keep() {
				if present {
					files[p] = version(curIno)
				}
				continue
			}
			if !durable || oldIno&dirBit != 0 {
				continue // the name goes (a directory gone since is not brought back: the library removes none)
			}
			if present && curIno == oldIno && keep() {
				files[p] = version(curIno)
				continue
			}
			files[p] = st.content[oldIno]
		}
	}
	walk(root)
	return files, dirs
}

// sectorSize is the unit a disk writes whole: a power cut keeps each
// sector written since the file's last fsync or loses it, never part of
// one (a counter's 8 bytes and a 512-byte lease record sit in one
// sector). SNAPID_SIM_SECTOR=1 tears at every byte instead.
var sectorSize = envSector()

func envSector() int {
	if n, err := strconv.Atoi(os.Getenv("SNAPID_SIM_SECTOR")); err == nil && n > 0 {
		return n
	}
	return 512
}

// torn is what a power cut leaves of a file that held old when last
// synced and now since: each sector that differs is either now's or
// old's (zeros past old's end), and the size is either (one write's
// extension of the file is one change of its size).
func torn(old, now []byte, rng *rand.Rand) []byte {
	size := len(now)
	if len(old) != len(now) && rng.IntN(2) == 0 {
		size = len(old)
	}
	out := make([]byte, size)
	for at := 0; at < size; at += sectorSize {
		end := min(at+sectorSize, size)
		src := old
		if rng.IntN(2) == 0 {
			src = now
		}
		if at < len(src) {
			copy(out[at:end], src[at:min(end, len(src))])
		}
	}
	return out
}

// applyCut puts the host's files back to what a power cut at st leaves
// (cutResult); every process of the host must be gone already. Whatever
// was done to the files after st was taken is undone with it.
func (d *disk) applyCut(st *diskState, rng *rand.Rand, keepSome bool) error {
	d.fault.disarm()
	files, dirs := st.cutResult(filepath.Clean(d.root), rng, keepSome)
	var drop []string
	err := filepath.WalkDir(d.root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if !dirs[p] {
				drop = append(drop, p)
				return filepath.SkipDir
			}
			return nil
		}
		if _, ok := files[p]; !ok {
			drop = append(drop, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range drop {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, files[p]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := rewrite(p, files[p]); err != nil {
			return err
		}
	}
	return d.settle()
}

// isDirEntry reports whether de is a directory, not following a link.
func isDirEntry(dir string, name string) (uint64, bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
		return 0, false, err
	}
	return st.Ino, st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}
