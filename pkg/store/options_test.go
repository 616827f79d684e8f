package store

import "testing"

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
