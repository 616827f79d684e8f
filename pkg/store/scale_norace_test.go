//go:build !race

package store_test

// A test of scale alone, left out of the race detector's run, under which the embedded
// FerretDB takes minutes over it.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"

	"github.com/campus-it/ucs/pkg/clocktest"
	"github.com/campus-it/ucs/pkg/store"
)

// TestSweepManyExpiredSignInRecords: the hourly sweep of expired sign-in records works
// when more than SQLite's 32,766 bound parameters' worth of them expired (a sweep that did
// not run for a while, a busy campus): FerretDB deletes the matches of a DeleteMany in one
// `DELETE … WHERE _id IN (?, ?, …)`.
func TestSweepManyExpiredSignInRecords(t *testing.T) {
	clk := clocktest.New(at(0))
	st, db := rawRig(t, clk.Now)
	ctx := context.Background()
	old := clk.Now().Add(-48 * time.Hour)
	const nExpired = 33_000
	docs := make([]any, 0, nExpired)
	for i := range nExpired {
		docs = append(docs, store.AuthCode{Hash: fmt.Sprintf("code%07d", i), ClientID: "c", RedirectURI: "https://app/cb",
			Scope: "openid", UserID: "u", SessionKey: "k", SID: "s", AuthTime: old, Expires: old.Add(time.Minute), At: old})
	}
	bulk(t, db.Collection("auth_codes"), docs)
	// A live session, which the sweep must leave, in a collection swept after auth_codes.
	if _, err := st.PutSession(ctx, store.Session{Key: "live", SID: "sid-live", UserID: "u-live", Expires: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	n, err := st.Sweep(ctx)
	t.Logf("Sweep: %d removed in %s, err %v", n, time.Since(t0), err)
	left, cerr := db.Collection("auth_codes").CountDocuments(ctx, bson.D{})
	if cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil || n != nExpired || left != 0 {
		t.Fatalf("sweep of %d expired authorization codes: removed %d, %d left, err: %v", nExpired, n, left, err)
	}
}
