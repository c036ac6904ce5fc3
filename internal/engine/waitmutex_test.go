package engine

import "testing"

func TestWaitMutex(t *testing.T) {
	var m waitMutex
	if !m.TryLock() {
		t.Fatal("a new waitMutex is locked")
	}
	if m.TryLock() {
		t.Fatal("TryLock took a held waitMutex")
	}
	done := make(chan struct{})
	close(done)
	if m.LockOrDone(done) {
		t.Fatal("LockOrDone took a held waitMutex")
	}
	m.Unlock()
	if !m.LockOrDone(done) {
		t.Fatal("LockOrDone did not take a free waitMutex")
	}
	m.Unlock()
	m.Lock()
	if m.TryLock() {
		t.Fatal("TryLock took a waitMutex held by Lock")
	}
	m.Unlock()
}
