package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/event"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
)

// TestBindByFollower: a binding made on the binding page is found by user number and by
// openid; a follower binds one user number; a user number bound again moves; a follower's
// record that no longer matches its binding (changed elsewhere) names no one; unbinding
// checks the pair; and the follower state of the platform's events is kept throughout.
func TestBindByFollower(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)
	st := embeddedtest.Store(t, func() time.Time { return t0 })
	of := func(openid string) string {
		t.Helper()
		b, err := st.BindingOf(ctx, openid)
		if errors.Is(err, store.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return b.UserID
	}

	if replaced, err := st.Bind(ctx, "u1", "oA"); err != nil || replaced != "" {
		t.Fatalf("bind: %q %v", replaced, err)
	}
	if b, err := st.Binding(ctx, "u1"); err != nil || b.OpenID != "oA" || !b.Following || !b.Updated.Equal(t0) {
		t.Fatalf("binding %+v %v", b, err)
	}
	if of("oA") != "u1" {
		t.Fatal("not found by openid")
	}
	// Another user number on the same follower replaces the first.
	if replaced, err := st.Bind(ctx, "u2", "oA"); err != nil || replaced != "u1" {
		t.Fatalf("rebind: %q %v", replaced, err)
	}
	if _, err := st.Binding(ctx, "u1"); !errors.Is(err, store.ErrNotFound) || of("oA") != "u2" {
		t.Fatalf("u1 still bound: %v, oA → %q", err, of("oA"))
	}
	// The user number moves to another follower.
	if _, err := st.Bind(ctx, "u2", "oB"); err != nil || of("oA") != "" || of("oB") != "u2" {
		t.Fatalf("move: %v, oA → %q, oB → %q", err, of("oA"), of("oB"))
	}
	// Changed elsewhere (the configuration): the follower's record names no one any more.
	if err := st.PutBinding(ctx, store.Binding{UserID: "u2", OpenID: "oC"}); err != nil || of("oB") != "" {
		t.Fatalf("after a change elsewhere oB → %q (%v)", of("oB"), err)
	}
	// The platform's events still decide following; binding keeps them.
	if err := st.SetFollowing(ctx, "oD", false, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Bind(ctx, "u3", "oD"); err != nil {
		t.Fatal(err)
	}
	if b, err := st.Binding(ctx, "u3"); err != nil || b.Following {
		t.Fatalf("binding an unsubscribed follower made it following: %+v %v", b, err)
	}
	if err := st.SetFollowing(ctx, "oD", true, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if b, _ := st.Binding(ctx, "u3"); !b.Following || of("oD") != "u3" {
		t.Fatalf("a subscribe after binding: %+v, oD → %q", b, of("oD"))
	}
	// Unbinding checks the pair.
	if err := st.Unbind(ctx, "u3", "oA"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unbinding another follower's pair: %v", err)
	}
	if err := st.Unbind(ctx, "u3", "oD"); err != nil || of("oD") != "" {
		t.Fatalf("unbind: %v, oD → %q", err, of("oD"))
	}
	if _, err := st.Binding(ctx, "u3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("still bound: %v", err)
	}
}

// commandGate holds the first command named cmd on collection coll until open is closed.
type commandGate struct {
	cmd, coll     string
	once          sync.Once
	reached, open chan struct{}
}

func newCommandGate(cmd, coll string) *commandGate {
	return &commandGate{cmd: cmd, coll: coll, reached: make(chan struct{}), open: make(chan struct{})}
}

// interleave runs first (replica 1's change, whose store has the gate's monitor) until it
// sends the gate's command, then meanwhile (another replica's change), then lets first go on;
// the test fails if either does.
func (g *commandGate) interleave(t *testing.T, first, meanwhile func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- first() }()
	select {
	case <-g.reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("replica 1 never sent %s to %s", g.cmd, g.coll)
	}
	if err := meanwhile(); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// twoReplicas opens two stores over one database of one FerretDB, as two replicas over one
// MongoDB: the first with the command monitor m.
func twoReplicas(t *testing.T, m *event.CommandMonitor) (r1, r2 *store.Store) {
	t.Helper()
	ctx := context.Background()
	f := embeddedtest.FerretDB(t)
	db := embeddedtest.DBName(t)
	open := func(m *event.CommandMonitor) *store.Store {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := store.Open(cctx, store.Options{URI: f.URI(), Database: db, Monitor: m})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close(context.Background()) })
		return st
	}
	r1, r2 = open(m), open(nil)
	if err := f.IndexIDs(ctx, db); err != nil {
		t.Fatal(err)
	}
	return r1, r2
}

func (g *commandGate) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if v, err := e.Command.LookupErr(g.cmd); e.CommandName != g.cmd || err != nil || v.StringValue() != g.coll {
			return
		}
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.reached)
			<-g.open
		}
	}}
}

// Two front ends (two stores over one database, as two replicas over one MongoDB) bind two
// user numbers to one follower at the same instant, each step of one falling between the
// other's: the follower ends bound to one user number, the one its record points to.
func TestBindRaceAcrossReplicasLeavesOneBinding(t *testing.T) {
	const follower = "oShared00000000000000000001"
	// Replica 1 is held at each of its writes in turn: its binding, its claim of the follower.
	for _, held := range []struct{ cmd, coll string }{{"update", "bindings"}, {"findAndModify", "followers"}} {
		t.Run(held.cmd+" "+held.coll, func(t *testing.T) {
			ctx := context.Background()
			g := newCommandGate(held.cmd, held.coll)
			r1, r2 := twoReplicas(t, g.monitor())
			g.interleave(t,
				func() error { _, err := r1.Bind(ctx, "2020000001", follower); return err },
				func() error { _, err := r2.Bind(ctx, "2020000002", follower); return err })
			var users []string
			for _, u := range []string{"2020000001", "2020000002"} {
				switch b, err := r2.Binding(ctx, u); {
				case err == nil && b.OpenID == follower:
					users = append(users, u)
				case err != nil && !errors.Is(err, store.ErrNotFound):
					t.Fatal(err)
				}
			}
			owner, err := r2.BindingOf(ctx, follower)
			if len(users) != 1 || err != nil || owner.UserID != users[0] {
				t.Fatalf("one follower, one user number: bound to %v; its record names %q (%v)", users, owner.UserID, err)
			}
		})
	}
}

// Two replicas: one clears a follower's pointer (Unbind, or Bind moving a user number to
// another follower) while the other binds that follower to another user number: the new
// binding's pointer stays, the page finds it, and the next Bind of the follower replaces it,
// one follower, one user number.
func TestClearingAFollowerKeepsAnotherReplicasClaim(t *testing.T) {
	const (
		oA = "oReviewFollowerA000000000001"
		oB = "oReviewFollowerB000000000001"
	)
	for _, tc := range []struct {
		name  string
		first func(ctx context.Context, r1 *store.Store) error
	}{
		{"unbind", func(ctx context.Context, r1 *store.Store) error { return r1.Unbind(ctx, "2020000001", oA) }},
		{"bind elsewhere", func(ctx context.Context, r1 *store.Store) error {
			_, err := r1.Bind(ctx, "2020000001", oB)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := newCommandGate("update", "followers")
			r1, r2 := twoReplicas(t, g.monitor())
			if _, err := r2.Bind(ctx, "2020000001", oA); err != nil {
				t.Fatal(err)
			}
			g.interleave(t, func() error { return tc.first(ctx, r1) },
				func() error { _, err := r2.Bind(ctx, "2020000002", oA); return err })
			if b, err := r2.Binding(ctx, "2020000002"); err != nil || b.OpenID != oA {
				t.Fatalf("2020000002: %+v %v", b, err)
			}
			owner, err := r2.BindingOf(ctx, oA)
			if err != nil || owner.UserID != "2020000002" {
				t.Errorf("follower %s is bound to 2020000002 but the binding page finds %q (%v)", oA, owner.UserID, err)
			}
			// Another student binds the follower: one follower, one user number.
			if _, err := r2.Bind(ctx, "2020000003", oA); err != nil {
				t.Fatal(err)
			}
			if b, err := r2.Binding(ctx, "2020000002"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("follower %s now bound to both 2020000002 (%+v, %v) and 2020000003", oA, b, err)
			}
		})
	}
}

// A user number moves from follower A to B on one replica and, a moment later, back to A on
// another: the first replica's clearing of A comes after the new claim of A by the same user
// number, and leaves it (the clear names the claim it replaces by its time), so the page finds
// the binding and the next student to bind A replaces it.
func TestClearingAFollowerKeepsTheSameUsersNewClaim(t *testing.T) {
	const (
		oA = "oReviewFollowerA000000000009"
		oB = "oReviewFollowerB000000000009"
		u  = "2020000001"
		v  = "2020000002"
	)
	ctx := context.Background()
	g := newCommandGate("update", "followers")
	r1, r2 := twoReplicas(t, g.monitor())
	if _, err := r2.Bind(ctx, u, oA); err != nil {
		t.Fatal(err)
	}
	g.interleave(t,
		func() error { _, err := r1.Bind(ctx, u, oB); return err }, // held as it clears A
		func() error { _, err := r2.Bind(ctx, u, oA); return err }) // back to A
	if b, err := r2.Binding(ctx, u); err != nil || b.OpenID != oA {
		t.Fatalf("%s: %+v %v; want bound to %s", u, b, err, oA)
	}
	owner, err := r2.BindingOf(ctx, oA)
	if err != nil || owner.UserID != u {
		t.Errorf("%s is bound to %s (the last Bind) but the binding page finds %q on %s (%v)", u, oA, owner.UserID, oA, err)
	}
	if _, err := r2.Bind(ctx, v, oA); err != nil {
		t.Fatal(err)
	}
	if b, err := r2.Binding(ctx, u); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("follower %s now bound to both %s (%+v, %v) and %s", oA, u, b, err, v)
	}
}

// Replica 1 removes a user number's binding that it read a moment before (Bind replacing the
// follower's previous user number, or Unbind); between the read and the delete another replica
// moves that user number to another follower. The delete must not remove the new binding: the
// user number's last choice was the other follower, and a push to it must still be delivered.
func TestRemovingABindingKeepsAnotherReplicasNewBinding(t *testing.T) {
	const (
		oA = "oReviewFollowerA000000000101"
		oB = "oReviewFollowerB000000000101"
		u1 = "2020000001"
		u2 = "2020000002"
	)
	for _, tc := range []struct {
		name  string
		first func(ctx context.Context, r1 *store.Store) error
	}{
		{"bind replacing the follower's user number", func(ctx context.Context, r1 *store.Store) error {
			// u1's binding to A was replaced meanwhile: Bind removed none.
			if replaced, err := r1.Bind(ctx, u2, oA); err != nil || replaced != "" {
				return fmt.Errorf("bind: replaced %q (%w), want none", replaced, err)
			}
			return nil
		}},
		{"unbind", func(ctx context.Context, r1 *store.Store) error {
			// u1 is no longer bound to A when the delete would run: as the doc says.
			if err := r1.Unbind(ctx, u1, oA); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("unbind of a binding replaced meanwhile: %w, want ErrNotFound", err)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := newCommandGate("delete", "bindings")
			r1, r2 := twoReplicas(t, g.monitor())
			if _, err := r2.Bind(ctx, u1, oA); err != nil {
				t.Fatal(err)
			}
			// Meanwhile the student of u1 binds their new phone's follower B on replica 2.
			g.interleave(t, func() error { return tc.first(ctx, r1) },
				func() error { _, err := r2.Bind(ctx, u1, oB); return err })
			b, err := r2.Binding(ctx, u1)
			if err != nil || b.OpenID != oB {
				t.Fatalf("%s was last bound to %s on replica 2, but its binding is now %+v (%v)", u1, oB, b, err)
			}
			if owner, err := r2.BindingOf(ctx, oB); err != nil || owner.UserID != u1 {
				t.Errorf("follower %s: binding page finds %q (%v), want %s", oB, owner.UserID, err, u1)
			}
		})
	}
}

// BenchmarkBindMoveAmong100k measures the binding page's move of a user number from one
// follower to another with 100,000 other bindings and followers stored: a Bind whose user
// number was bound before, so that the previous follower's claim is cleared, and an Unbind. Both
// conditional writes (on more than _id) scan a collection on FerretDB; on MongoDB they use _id's
// index.
func BenchmarkBindMoveAmong100k(b *testing.B) {
	st := embeddedtest.Store(b, nil)
	ctx := context.Background()
	if _, err := st.ImportBindings(ctx, rows(100_000, func(i int) string { return fmt.Sprintf("o%027d", i) }), nil); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if _, err := st.Bind(ctx, "2099000001", fmt.Sprintf("oMoveA%022d", i)); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Bind(ctx, "2099000001", fmt.Sprintf("oMoveB%022d", i)); err != nil {
			b.Fatal(err)
		}
		if err := st.Unbind(ctx, "2099000001", fmt.Sprintf("oMoveB%022d", i)); err != nil {
			b.Fatal(err)
		}
	}
}
