package ctxsync

import "sync"

// Mutex is a mutex whose wait can be given up: a caller whose
// context ends while another goroutine holds it (an update waiting for
// another process's lock on the counter, an extension waiting for a
// registry that does not answer) stops waiting and takes nothing. The
// Generator's mutex over its counter file and the reservation's over its
// extensions are Mutexes. Its zero value is unlocked.
type Mutex struct {
	once sync.Once
	ch   chan struct{} // holds one token while locked
}

func (m *Mutex) sem() chan struct{} {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	return m.ch
}

// Lock waits for the mutex.
func (m *Mutex) Lock() { m.sem() <- struct{}{} }

// LockOrDone waits for the mutex until done is closed; it reports
// whether it holds the mutex. A free mutex is taken whether done is
// closed or not; a nil done waits as Lock does.
func (m *Mutex) LockOrDone(done <-chan struct{}) bool {
	if m.TryLock() {
		return true
	}
	select {
	case m.sem() <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// TryLock takes the mutex if it is free and reports whether it did.
func (m *Mutex) TryLock() bool {
	select {
	case m.sem() <- struct{}{}:
		return true
	default:
		return false
	}
}

// Unlock lets the mutex go; it must be held.
func (m *Mutex) Unlock() { <-m.sem() }
