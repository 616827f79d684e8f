package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/event"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
)

func rows(n int, openID func(i int) string) []store.Binding {
	out := make([]store.Binding, n)
	for i := range out {
		out[i] = store.Binding{UserID: fmt.Sprintf("3%09d", i), OpenID: openID(i)}
	}
	return out
}

func TestImportBindings(t *testing.T) {
	clk := clocktest.New(t0)
	st := embeddedtest.Store(t, clk.Now)
	ctx := context.Background()
	// Stored before: users 0..99, bound to "old" openids.
	for i, b := range rows(100, func(i int) string { return "old" + strconv.Itoa(i) }) {
		if i%2 == 0 { // every other one is bound as the file will say
			b.OpenID = "o" + strconv.Itoa(i)
		}
		if err := st.PutBinding(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// The file: users 0..4999 (more than one insert batch), bound to "o<i>".
	file := rows(5000, func(i int) string { return "o" + strconv.Itoa(i) })
	clk.Set(t0.Add(time.Hour))
	var last store.ImportProgress
	res, err := st.ImportBindings(ctx, file, func(p store.ImportProgress) {
		if p.Done < last.Done || p.Compared < last.Compared {
			t.Errorf("progress went back: %+v after %+v", p, last)
		}
		last = p
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.ImportResult{Inserted: 4900, Updated: 50, Unchanged: 50}); !reflect.DeepEqual(res, want) {
		t.Fatalf("first import: %+v, want %+v", res, want)
	}
	if last.Done != len(file) || last.Compared != 100 {
		t.Fatalf("last progress %+v, want done %d after comparing 100", last, len(file))
	}
	for _, i := range []int{0, 1, 99, 100, 4999} {
		b, err := st.Binding(ctx, fmt.Sprintf("3%09d", i))
		if err != nil || b.OpenID != "o"+strconv.Itoa(i) {
			t.Fatalf("user %d: %+v %v", i, b, err)
		}
		// Unchanged rows were not written: they keep the time they were stored.
		wantAt := clk.Now()
		if i < 100 && i%2 == 0 {
			wantAt = t0
		}
		if !b.Updated.Equal(wantAt) {
			t.Fatalf("user %d updated at %v, want %v", i, b.Updated, wantAt)
		}
	}

	// The same file again changes nothing, and writes nothing.
	clk.Set(t0.Add(2 * time.Hour))
	res, err = st.ImportBindings(ctx, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.ImportResult{Unchanged: 5000}); !reflect.DeepEqual(res, want) {
		t.Fatalf("second import: %+v, want %+v", res, want)
	}
	if b, _ := st.Binding(ctx, "3000004999"); !b.Updated.Equal(t0.Add(time.Hour)) {
		t.Fatalf("a second import rewrote a binding: %v", b.Updated)
	}
	n := 0
	if err := st.EachBinding(ctx, func(store.Binding) error { n++; return nil }); err != nil || n != 5000 {
		t.Fatalf("%d bindings stored (%v), want 5000", n, err)
	}

	if _, err := st.ImportBindings(ctx, append(rows(2, func(int) string { return "x" }), rows(1, func(int) string { return "y" })...), nil); err == nil {
		t.Fatal("rows with a user number twice were imported")
	}
}

// BenchmarkImportBindings500k measures an import of 500,000 new bindings into the embedded
// FerretDB, then the same file again (nothing to write). It needs UCS_IMPORT_500K=1: it takes
// a minute and half a gigabyte of disk. Run it with -benchtime=1x.
func BenchmarkImportBindings500k(b *testing.B) {
	if os.Getenv("UCS_IMPORT_500K") == "" {
		b.Skip("set UCS_IMPORT_500K=1 to run")
	}
	st := embeddedtest.Store(b, nil)
	ctx := context.Background()
	file := rows(500_000, func(i int) string { return fmt.Sprintf("o%027d", i) })
	for b.Loop() {
		t := time.Now()
		res, err := st.ImportBindings(ctx, file, nil)
		if err != nil {
			b.Fatal(err)
		}
		first := time.Since(t)
		t = time.Now()
		again, err := st.ImportBindings(ctx, file, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("first import %v (%+v), %.0f rows/s; again %v (%+v)", first.Round(time.Millisecond), res,
			float64(len(file))/first.Seconds(), time.Since(t).Round(time.Millisecond), again)
	}
}

// TestImportKeepsOneUserPerFollower: a follower is bound to one user number. A row naming a
// follower another user number keeps (bound on the binding page) is left out and reported,
// and changes nothing; a row naming one whose user number the same import moves elsewhere is
// taken.
func TestImportKeepsOneUserPerFollower(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	if _, err := st.Bind(ctx, "2022000001", "oPhoneA"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Bind(ctx, "2022000003", "oPhoneC"); err != nil {
		t.Fatal(err)
	}
	res, err := st.ImportBindings(ctx, []store.Binding{
		{UserID: "2022000002", OpenID: "oPhoneA"}, // 2022000001 keeps oPhoneA
		{UserID: "2022000004", OpenID: "oPhoneC"}, // 2022000003 moves to oPhoneD below
		{UserID: "2022000003", OpenID: "oPhoneD"},
		{UserID: "2022000005", OpenID: "oPhoneE"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Conflicts) != 1 || res.Conflicts[0] != (store.ImportConflict{Row: 0, UserID: "2022000001"}) ||
		res.Inserted != 2 || res.Updated != 1 {
		t.Fatalf("import: %+v", res)
	}
	if _, err := st.Binding(ctx, "2022000002"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("2022000002 bound to a follower 2022000001 keeps: %v", err)
	}
	if b, err := st.BindingOf(ctx, "oPhoneA"); err != nil || b.UserID != "2022000001" {
		t.Fatalf("oPhoneA: %+v %v", b, err)
	}
	for u, o := range map[string]string{"2022000004": "oPhoneC", "2022000003": "oPhoneD", "2022000005": "oPhoneE"} {
		if b, err := st.Binding(ctx, u); err != nil || b.OpenID != o {
			t.Errorf("%s: %+v %v, want %s", u, b, err, o)
		}
	}
	if _, err := st.ImportBindings(ctx, []store.Binding{{UserID: "1", OpenID: "x"}, {UserID: "2", OpenID: "x"}}, nil); err == nil {
		t.Fatal("an openid given twice was imported")
	}
}

// TestImportConflictCascade: a row whose openid's current owner the same file moves away is
// left out when the owner's own row is itself left out: the owner keeps the follower.
func TestImportConflictCascade(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	// On the binding page: B holds follower x, C holds follower z.
	if _, err := st.Bind(ctx, "2022000002", "oX"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Bind(ctx, "2022000003", "oZ"); err != nil {
		t.Fatal(err)
	}
	res, err := st.ImportBindings(ctx, []store.Binding{
		{UserID: "2022000002", OpenID: "oZ"}, // B -> z: z is kept by C (not in the file): a conflict
		{UserID: "2022000001", OpenID: "oX"}, // A -> x: x's owner B "moves" (but B's row was refused)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("import result: %+v", res)
	if got := boundTo(t, st, "oX", "2022000001", "2022000002", "2022000003"); len(got) > 1 {
		t.Fatalf("follower oX is bound to %d user numbers after the import: %v (conflicts reported: %+v)", len(got), got, res.Conflicts)
	}
}

// boundTo lists the user numbers (of those given) whose binding names openID.
func boundTo(t *testing.T, st *store.Store, openID string, users ...string) []string {
	t.Helper()
	var out []string
	for _, u := range users {
		b, err := st.Binding(context.Background(), u)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			t.Fatal(err)
		case b.OpenID == openID:
			out = append(out, u)
		}
	}
	return out
}

// TestImportedBindingSeenByTheBindingPage: a binding the import wrote is the follower's for the
// binding page too, which replaces it when the follower binds another user number.
func TestImportedBindingSeenByTheBindingPage(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	if _, err := st.ImportBindings(ctx, []store.Binding{{UserID: "2022000001", OpenID: "oX"}}, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := st.BindingOf(ctx, "oX"); err != nil || b.UserID != "2022000001" {
		t.Errorf("the binding page's view of follower oX after the import: %+v, %v (want bound to 2022000001)", b, err)
	}
	replaced, err := st.Bind(ctx, "2022000009", "oX")
	if err != nil {
		t.Fatal(err)
	}
	if got := boundTo(t, st, "oX", "2022000001", "2022000009"); len(got) != 1 || got[0] != "2022000009" || replaced != "2022000001" {
		t.Fatalf("follower oX is bound to %v after the binding page bound 2022000009 (replaced %q)", got, replaced)
	}
}

// TestImportStoppedMidwayThenRunAgainBindsForTheBindingPage: an import stopped (Ctrl-C, a
// store error) after any of its writes, then run again as the guide says it safely can, leaves
// each binding the follower's on the binding page too. Written bindings first, it left one
// whose follower's record did not name it: the page said the follower was not bound, unbind
// did nothing, and the second run found the binding unchanged and wrote nothing.
func TestImportStoppedMidwayThenRunAgainBindsForTheBindingPage(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	// A binding takes two writes: its follower's record and the binding. Stopped after the
	// first, whichever it is.
	for _, stopAfter := range []int{1} {
		ctx := context.Background()
		importCtx, stop := context.WithCancel(ctx)
		var mu sync.Mutex
		armed, writes, done := false, map[int64]bool{}, 0 // the import's writes, once armed
		m := &event.CommandMonitor{
			Started: func(_ context.Context, e *event.CommandStartedEvent) {
				if e.CommandName == "insert" || e.CommandName == "update" {
					mu.Lock()
					defer mu.Unlock()
					if !armed {
						return
					}
					writes[e.RequestID] = true
				}
			},
			Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
				mu.Lock()
				defer mu.Unlock()
				if writes[e.RequestID] {
					if done++; done == stopAfter {
						stop()
						armed = false
					}
				}
			},
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := store.Open(cctx, store.Options{URI: f.URI(), Database: embeddedtest.DBName(t) + strconv.Itoa(stopAfter), Monitor: m, Tool: true})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close(context.Background()) })
		rows := []store.Binding{{UserID: "2024000001", OpenID: "oStoppedMidway000000000000001"}}
		mu.Lock()
		armed = true
		mu.Unlock()
		if _, err := st.ImportBindings(importCtx, rows, nil); err == nil {
			t.Fatalf("stopped after %d writes: the import reported no error", stopAfter)
		}
		if _, err := st.ImportBindings(ctx, rows, nil); err != nil {
			t.Fatal(err)
		}
		if b, err := st.Binding(ctx, rows[0].UserID); err != nil || b.OpenID != rows[0].OpenID {
			t.Fatalf("stopped after %d writes, run again: the binding is %+v %v", stopAfter, b, err)
		}
		if b, err := st.BindingOf(ctx, rows[0].OpenID); err != nil || b.UserID != rows[0].UserID {
			t.Errorf("stopped after %d writes, run again: the follower %s is bound to %s (pushes reach it), but the binding page finds %+v %v",
				stopAfter, rows[0].OpenID, rows[0].UserID, b, err)
		}
	}
}
