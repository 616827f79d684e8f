package store

import (
	"fmt"
	"testing"
	"time"
)

// TestWriteConcern: majority unless the URI says otherwise.
func TestWriteConcern(t *testing.T) {
	for uri, want := range map[string]any{
		"mongodb://db.example.edu/":                     "majority",
		"mongodb://db.example.edu/?w=majority":          "majority",
		"mongodb://db.example.edu/?replicaSet=rs0&w=1":  1,
		"mongodb://db.example.edu/?w=2&wtimeoutMS=5000": 2,
	} {
		wc := clientOptions(Options{URI: uri}).WriteConcern
		if wc == nil || wc.W != want {
			t.Errorf("%s: write concern %+v, want w=%v", uri, wc, want)
		}
	}
}

// TestServerSelectionTimeout: the wait for a server is ConnectTimeout unless the URI names one.
func TestServerSelectionTimeout(t *testing.T) {
	for uri, want := range map[string]time.Duration{
		"mongodb://db.example.edu/":                               30 * time.Second,
		"mongodb://db.example.edu/?serverSelectionTimeoutMS=2000": 2 * time.Second,
	} {
		if got := clientOptions(Options{URI: uri, ConnectTimeout: 30 * time.Second}).ServerSelectionTimeout; got == nil || *got != want {
			t.Errorf("%s: server selection timeout %v, want %s", uri, got, want)
		}
	}
}

// shiftedChain is n stored bindings u_i → o_i, and n-1 rows u_i → o_{i+1}: the openid column of
// a file shifted up by one row, the last user left out of the file. u_{n-1}, who keeps
// o_{n-1}, leaves out row n-2, which keeps o_{n-2} with u_{n-2}, and so on: every row is a
// conflict, each found only once the row after it is.
func shiftedChain(n int) (rows []Binding, want map[string]string, stored map[string]Binding, owners map[string][]string) {
	want, stored, owners = map[string]string{}, map[string]Binding{}, map[string][]string{}
	for i := range n {
		u, o := fmt.Sprintf("u%07d", i), fmt.Sprintf("o%07d", i)
		stored[u], owners[o] = Binding{UserID: u, OpenID: o}, []string{u}
	}
	for i := range n - 1 {
		b := Binding{UserID: fmt.Sprintf("u%07d", i), OpenID: fmt.Sprintf("o%07d", i+1)}
		rows, want[b.UserID] = append(rows, b), b.OpenID
	}
	return rows, want, stored, owners
}

// TestImportConflictsChain: every row of a shifted chain is left out, kept by the user number
// after it.
func TestImportConflictsChain(t *testing.T) {
	rows, want, stored, owners := shiftedChain(1000)
	out := importConflicts(rows, want, stored, owners)
	if len(out) != len(rows) {
		t.Fatalf("%d of %d rows left out", len(out), len(rows))
	}
	for i := range rows {
		if keeper := fmt.Sprintf("u%07d", i+1); out[i] != keeper {
			t.Fatalf("row %d kept by %q, want %q", i, out[i], keeper)
		}
	}
}

// BenchmarkImportConflictsChain: deciding which rows of a shifted chain are left out, by rows.
func BenchmarkImportConflictsChain(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rows, want, stored, owners := shiftedChain(n)
			for b.Loop() {
				importConflicts(rows, want, stored, owners)
			}
		})
	}
}
