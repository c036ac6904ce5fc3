package sim

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A directory made and never synced into its parent goes at a power cut,
// with the files in it; one synced into its parent stays.
func TestPowerCutLosesUnsyncedDirectory(t *testing.T) {
	root := t.TempDir()
	d := newDisk(root)
	if err := d.settle(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"lost", "kept"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.SyncDir(root); err != nil { // "kept" and "lost" both durable now...
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "lost")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "new"), 0o700); err != nil { // ...and "new" never synced
		t.Fatal(err)
	}
	if err := d.powerCut(rand.New(rand.NewPCG(1, 2)), false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory never synced into its parent survived the cut: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "kept")); err != nil {
		t.Errorf("a directory synced into its parent was lost: %v", err)
	}
	// Its file was never synced into it: the name goes.
	if _, err := os.Stat(filepath.Join(root, "kept", "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a name whose directory was never synced survived: %v", err)
	}
}

// A torn write keeps each sector whole, old or new, and the size of one
// or the other.
func TestTornKeepsWholeSectors(t *testing.T) {
	old := bytes.Repeat([]byte{1}, 3*sectorSize)
	now := bytes.Repeat([]byte{2}, 4*sectorSize)
	seen := map[string]bool{}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		b := torn(old, now, rng)
		if len(b) != len(old) && len(b) != len(now) {
			t.Fatalf("torn size %d, want %d or %d", len(b), len(old), len(now))
		}
		var k []byte
		for at := 0; at < len(b); at += sectorSize {
			s := b[at : at+sectorSize]
			if !bytes.Equal(s, bytes.Repeat(s[:1], sectorSize)) {
				t.Fatalf("sector %d torn within: %v", at/sectorSize, s[:8])
			}
			k = append(k, s[0])
		}
		seen[string(k)] = true
	}
	if len(seen) < 8 {
		t.Errorf("only %d mixes of old and new sectors in 200 cuts", len(seen))
	}
}

// A freeze fires at the k-th call: that call and every later call of the
// frozen process fail and change nothing; another process goes on (a
// kill), or every process stops (a cut).
func TestFreezeFiresAtTheKthCall(t *testing.T) {
	root := t.TempDir()
	d := newDisk(root)
	if err := d.settle(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(root, "c"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p0, p1 := procSeam{d: d, p: 0}, procSeam{d: d, p: 1}
	d.freeze.arm(2, "", true, false, 0)
	for i := range 2 {
		if _, err := p0.WriteAt(f, []byte{byte(i)}, 0); err != nil {
			t.Fatalf("call %d failed before the freeze: %v", i, err)
		}
	}
	if _, err := p0.WriteAt(f, []byte{9}, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the third call: %v, want EIO", err)
	}
	if err := p0.Sync(f); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a call after the freeze: %v, want EIO", err)
	}
	if _, err := p1.WriteAt(f, []byte{7}, 1); err != nil {
		t.Fatalf("another process after a kill: %v", err)
	}
	if b, _ := os.ReadFile(f.Name()); !bytes.Equal(b, []byte{1, 7}) {
		t.Fatalf("file %v, want [1 7]: a frozen call changed it", b)
	}
}
