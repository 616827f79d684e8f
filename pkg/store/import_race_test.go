package store_test

import (
	"context"
	"testing"

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
