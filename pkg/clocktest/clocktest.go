// Package clocktest is the one fake clock of the tests: components take
// their clock as a func() time.Time (Config.Now and the like), and a test
// passes (*Clock).Now and moves time on with Advance instead of sleeping.
//
// It lives in a package of its own, not in embeddedtest, so that the tests
// of packages without servers (cas, oauth, activity, platform) do not link
// the embedded NATS server and FerretDB to get a clock.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a fake clock whose time moves only when the test says so. It is
// safe for concurrent use: the component under test reads it from its own
// goroutines while the test advances it.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock standing at t; a fixed date makes failures print the
// same times on every run.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time. Its method value c.Now is the func() time.Time
// that components take.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d; a negative d moves it back, for a test
// that checks something as of an earlier time.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
