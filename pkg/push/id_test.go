package push

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

func TestNewIDConcurrent(t *testing.T) {
	const workers, each = 8, 2000
	now := time.UnixMilli(1714800000000) // one millisecond for all: order comes from entropy
	got := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				got[w] = append(got[w], NewID(now))
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for w, ids := range got {
		// Each goroutine sees its own IDs strictly increasing.
		if !slices.IsSorted(ids) {
			t.Errorf("worker %d: IDs not increasing", w)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate ID %s", id)
			}
			seen[id] = true
			if !ValidID(id) {
				t.Fatalf("NewID returned %q, not ValidID", id)
			}
			if u := ulid.MustParseStrict(id); u.Time() != uint64(now.UnixMilli()) {
				t.Fatalf("ID %s has time %d, want %d", id, u.Time(), now.UnixMilli())
			}
		}
	}
}

func TestNewIDSortsByTime(t *testing.T) {
	base := time.UnixMilli(1714800000000)
	var ids []string
	for i := range 50 {
		ids = append(ids, NewID(base.Add(time.Duration(i%5)*time.Millisecond+time.Duration(i/5)*time.Second)))
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	// Sorting the strings sorts by the time they were made for.
	for i := 1; i < len(sorted); i++ {
		a, b := ulid.MustParseStrict(sorted[i-1]), ulid.MustParseStrict(sorted[i])
		if a.Time() > b.Time() {
			t.Fatalf("%s sorts before %s but is later", sorted[i-1], sorted[i])
		}
	}
	if id := NewID(time.Unix(-100, 0)); !ValidID(id) || ulid.MustParseStrict(id).Time() != 0 {
		t.Errorf("NewID before 1970 = %s", id)
	}
}

func TestValidID(t *testing.T) {
	for s, want := range map[string]bool{
		"01HX4Z6Q8G7R2M3N5P9S0T1V2W":  true,
		"7ZZZZZZZZZZZZZZZZZZZZZZZZZ":  true,
		"00000000000000000000000000":  true,
		"8ZZZZZZZZZZZZZZZZZZZZZZZZZ":  false, // overflows 128 bits
		"01hx4z6q8g7r2m3n5p9s0t1v2w":  false, // not canonical
		"01HX4Z6Q8G7R2M3N5P9S0T1V2":   false,
		"01HX4Z6Q8G7R2M3N5P9S0T1V2WX": false,
		"01HX4Z6Q8G7R2M3N5P9S0T1V2I":  false,
		"01HX4Z6Q8G7R2M3N5P9S0T1V2L":  false,
		"01HX4Z6Q8G7R2M3N5P9S0T1V2O":  false,
		"01HX4Z6Q8G7R2M3N5P9S0T1V2U":  false,
		"01HX4Z6Q8G7R2M3N5P9S0T1V2-":  false,
		"../../../../../etc/passwd0":  false,
		"":                            false,
	} {
		if got := ValidID(s); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", s, got, want)
		}
		if want {
			if _, err := ulid.ParseStrict(s); err != nil {
				t.Errorf("ValidID accepts %q, ulid.ParseStrict says %v", s, err)
			}
		}
	}
}

func FuzzValidID(f *testing.F) {
	f.Add("01HX4Z6Q8G7R2M3N5P9S0T1V2W")
	f.Add("8ZZZZZZZZZZZZZZZZZZZZZZZZZ")
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidID(s) {
			return
		}
		u, err := ulid.ParseStrict(s)
		if err != nil || u.String() != s {
			t.Fatalf("ValidID accepts %q: %v", s, err)
		}
	})
}
