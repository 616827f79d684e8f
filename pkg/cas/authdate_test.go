package cas_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/cas"
)

// TestAuthenticationDateOnTheMinute: Apereo CAS 5/6/7 sends authenticationDate as
// java.time.ZonedDateTime.toString(), which leaves out seconds when they are zero
// ("2025-09-01T14:00+08:00[Asia/Shanghai]"). A single sign-on answer (isFromNewLogin=false)
// carrying it speaks of an authentication two hours ago, and AuthenticatedAt says so.
func TestAuthenticationDateOnTheMinute(t *testing.T) {
	now := time.Date(2025, 9, 1, 8, 0, 0, 0, time.UTC)
	want := now.Add(-2 * time.Hour) // 14:00 in Shanghai
	for _, date := range []string{
		"2025-09-01T14:00+08:00[Asia/Shanghai]", // ZonedDateTime on the minute
		"2025-09-01T06:00Z[UTC]",                // the same, in UTC
		"2025-09-01T06:00Z",                     // an OffsetDateTime / Instant-like value on the minute
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml;charset=UTF-8")
			_, _ = w.Write([]byte(`<cas:serviceResponse xmlns:cas='http://www.yale.edu/tp/cas'>
    <cas:authenticationSuccess>
        <cas:user>` + userNumber + `</cas:user>
        <cas:attributes>
            <cas:isFromNewLogin>false</cas:isFromNewLogin>
            <cas:authenticationDate>` + date + `</cas:authenticationDate>
            <cas:longTermAuthenticationRequestTokenUsed>false</cas:longTermAuthenticationRequestTokenUsed>
        </cas:attributes>
    </cas:authenticationSuccess>
</cas:serviceResponse>`))
		}))
		client, err := cas.New(cas.Config{BaseURL: srv.URL + "/cas"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := client.Validate(context.Background(), "ST-1-abcdef", service)
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", date, err)
		}
		if got := p.AuthenticatedAt(now); !got.Equal(want) {
			t.Errorf("authenticationDate %q (single sign-on, isFromNewLogin=false): AuthenticatedAt %s, want %s "+
				"(an authentication 2 h ago is taken for one made now)", date, got.UTC().Format(time.RFC3339), want.Format(time.RFC3339))
		}
	}
}
