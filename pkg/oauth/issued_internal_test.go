package oauth

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// An access token's issue time is read to the millisecond from its jti when that is the ULID
// of a time in its iat's second; otherwise (a token of an earlier version, a jti of another
// second) it is the start of the iat's second, so that a revocation in that second counts.
func TestIssuedAt(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 5, 300_000_000, time.UTC)
	tests := []struct {
		name string
		jti  string
		want time.Time
	}{
		{"a ULID of the issue time", accessJTI(at), at.Truncate(time.Millisecond)},
		{"a random jti", newJTI(), at.Truncate(time.Second)},
		{"a ULID of another second", accessJTI(at.Add(-time.Second)), at.Truncate(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := issuedAt(&Claims{RegisteredClaims: jwt.RegisteredClaims{ID: tt.jti, IssuedAt: jwt.NewNumericDate(at)}})
			if !ok || !got.Equal(tt.want) {
				t.Fatalf("issuedAt = %s, %v; want %s", got.Format(time.RFC3339Nano), ok, tt.want.Format(time.RFC3339Nano))
			}
		})
	}
	if _, ok := issuedAt(&Claims{RegisteredClaims: jwt.RegisteredClaims{ID: accessJTI(at)}}); ok {
		t.Fatal("a token without iat has an issue time")
	}
}
