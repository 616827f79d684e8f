package store_test

import (
	"context"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/event"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
)

// TestImportYieldsToAPageBindMadeMeanwhile: a student binds a follower on the binding page while
// an operator's import runs (after the import read the stored bindings, before it wrote): the
// import's row naming the same follower for another user number is undone and reported as a
// conflict, as it would have been had the import read the student's binding. The follower is
// bound to one user number, the student's, and the page shows it so.
func TestImportYieldsToAPageBindMadeMeanwhile(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	bound := false
	res, err := st.ImportBindings(ctx, []store.Binding{{UserID: "2020000001", OpenID: "oA"}, {UserID: "2020000003", OpenID: "oC"}},
		func(p store.ImportProgress) {
			if !bound {
				bound = true
				// The student's bind on the page, during the import.
				if _, err := st.Bind(ctx, "2020000002", "oA"); err != nil {
					t.Error(err)
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	var owners []string
	if err := st.EachBinding(ctx, func(b store.Binding) error {
		if b.OpenID == "oA" {
			owners = append(owners, b.UserID)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(owners) != 1 || owners[0] != "2020000002" {
		t.Fatalf("follower oA is bound to %v, want the student's 2020000002 alone (import result %+v)", owners, res)
	}
	if of, err := st.BindingOf(ctx, "oA"); err != nil || of.UserID != "2020000002" {
		t.Errorf("the page shows oA bound to %q (%v)", of.UserID, err)
	}
	if res.Inserted != 1 || len(res.Conflicts) != 1 || res.Conflicts[0] != (store.ImportConflict{Row: 0, UserID: "2020000002"}) {
		t.Errorf("import result %+v, want 1 inserted (oC) and row 0 a conflict with 2020000002", res)
	}
	if b, err := st.Binding(ctx, "2020000003"); err != nil || b.OpenID != "oC" {
		t.Errorf("the other row: %+v %v", b, err)
	}
}

// TestImportYieldKeepsTheRowsFormerBinding: user number 2020000002 is bound to oOld; an import
// moves it to oA, while a student binds oA to 2020000003 on the binding page (after the
// import's read, before its write). The row is reported as a conflict ("unbind it first"), as it
// would have been had the import read the student's bind; then 2020000002 keeps oOld, as the
// import leaves every conflicting row's user number where it is. It must not end up unbound.
func TestImportYieldKeepsTheRowsFormerBinding(t *testing.T) {
	st := embeddedtest.Store(t, nil)
	ctx := context.Background()
	if _, err := st.Bind(ctx, "2020000002", "oOld"); err != nil {
		t.Fatal(err)
	}
	bound := false
	res, err := st.ImportBindings(ctx, []store.Binding{{UserID: "2020000002", OpenID: "oA"}},
		func(p store.ImportProgress) {
			if !bound {
				bound = true
				if _, err := st.Bind(ctx, "2020000003", "oA"); err != nil {
					t.Error(err)
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Conflicts) != 1 || res.Updated != 0 {
		t.Fatalf("import result %+v, want row 0 a conflict", res)
	}
	b, err := st.Binding(ctx, "2020000002")
	if err != nil || b.OpenID != "oOld" {
		t.Errorf("2020000002, whose row was reported as a conflict (left out), is now %+v (%v); want still bound to oOld", b, err)
	}
	if of, err := st.BindingOf(ctx, "oOld"); err != nil || of.UserID != "2020000002" {
		t.Errorf("the binding page of oOld shows %q (%v); want 2020000002", of.UserID, err)
	}
}

// TestImportYieldDoesNotUndoALaterBind: as in TestImportYieldsToAPageBindMadeMeanwhile, student
// 2020000003 binds oA on the page while an import binds oA to 2020000002. The import's last
// step reads every binding again (seconds on a large table), then gives oA back to 2020000003.
// Between that read and the give-back the student binds 2020000003 to another follower, oZ,
// on another replica (a second WeChat account). The student's later bind must stand:
// 2020000003 is bound to oZ, not moved back to oA by the import.
func TestImportYieldDoesNotUndoALaterBind(t *testing.T) {
	ctx := context.Background()
	var page *store.Store
	var once sync.Once
	m := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if v, err := e.Command.LookupErr("delete"); e.CommandName != "delete" || err != nil || v.StringValue() != "bindings" {
			return
		}
		// The import's undoing of its row: its read of every binding is done.
		once.Do(func() {
			if _, err := page.Bind(ctx, "2020000003", "oZ"); err != nil {
				t.Error(err)
			}
		})
	}}
	st, r2 := twoReplicas(t, m)
	page = r2
	bound := false
	res, err := st.ImportBindings(ctx, []store.Binding{{UserID: "2020000002", OpenID: "oA"}},
		func(p store.ImportProgress) {
			if !bound {
				bound = true
				if _, err := page.Bind(ctx, "2020000003", "oA"); err != nil {
					t.Error(err)
				}
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Binding(ctx, "2020000003")
	if err != nil || b.OpenID != "oZ" {
		t.Errorf("2020000003, which the student bound to oZ last, is bound to %q (%v): the import moved it back (result %+v)", b.OpenID, err, res)
	}
	if of, err := st.BindingOf(ctx, "oZ"); err != nil || of.UserID != "2020000003" {
		t.Errorf("the page of oZ shows %q (%v); want 2020000003", of.UserID, err)
	}
}
