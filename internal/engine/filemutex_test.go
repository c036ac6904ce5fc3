package engine

import "testing"

func TestFileMutex(t *testing.T) {
	var m fileMutex
	if !m.TryLock() {
		t.Fatal("a new fileMutex is locked")
	}
	if m.TryLock() {
		t.Fatal("TryLock took a held fileMutex")
	}
	done := make(chan struct{})
	close(done)
	if m.LockOrDone(done) {
		t.Fatal("LockOrDone took a held fileMutex")
	}
	m.Unlock()
	if !m.LockOrDone(done) {
		t.Fatal("LockOrDone did not take a free fileMutex")
	}
	m.Unlock()
	m.Lock()
	if m.TryLock() {
		t.Fatal("TryLock took a fileMutex held by Lock")
	}
	m.Unlock()
}
