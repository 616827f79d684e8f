package natskv_test

import (
	"context"
	"errors"
	"testing"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/natskv"
)

// TestForgetOnlyItsRevision: Forget removes a record only while it is the revision Create
// wrote, and leaves nothing behind (no delete marker takes room in the bucket); a record
// written over it since is kept.
func TestForgetOnlyItsRevision(t *testing.T) {
	_, js := embeddedtest.JetStream(t)
	ctx := context.Background()
	r, err := natskv.OpenRecords(ctx, js, "records", 0, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := r.Create(ctx, "a", []byte("claim"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Forget(ctx, "a", rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Get(ctx, "a"); !errors.Is(err, natskv.ErrNoRecord) {
		t.Fatalf("a forgotten record: %v", err)
	}
	kv, err := js.KeyValue(ctx, "records")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.Values() != 0 || st.Bytes() != 0 {
		t.Fatalf("the bucket after Forget: %v, %v", st, err)
	}
	if rev, err = r.Create(ctx, "b", []byte("claim")); err != nil {
		t.Fatal(err)
	}
	if err := r.Put(ctx, "b", []byte("taken over")); err != nil {
		t.Fatal(err)
	}
	if err := r.Forget(ctx, "b", rev); err != nil {
		t.Fatal(err)
	}
	if v, _, err := r.Get(ctx, "b"); err != nil || string(v) != "taken over" {
		t.Fatalf("a record written over the forgotten revision: %q, %v", v, err)
	}
}
