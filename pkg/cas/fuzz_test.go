package cas

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseResponse feeds the validation answer parser, which reads what a
// remote server sent, with arbitrary bodies. It must not panic, a success
// must name a user, and no error may quote the ticket.
func FuzzParseResponse(f *testing.F) {
	const ticket = "ST-42-FUZZTICKET-cas.example.edu"
	for _, seed := range []string{
		`<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:authenticationSuccess><cas:user>u</cas:user><cas:attributes><cas:a>1</cas:a><cas:a>2</cas:a></cas:attributes></cas:authenticationSuccess></cas:serviceResponse>`,
		`<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:authenticationFailure code="INVALID_TICKET">Ticket ` + ticket + ` not recognized</cas:authenticationFailure></cas:serviceResponse>`,
		`<serviceResponse xmlns="http://www.yale.edu/tp/cas"><authenticationSuccess><user> </user></authenticationSuccess></serviceResponse>`,
		`<cas:serviceResponse xmlns:cas="http://www.yale.edu/tp/cas"><cas:` + ticket + `/></cas:serviceResponse>`,
		`<!DOCTYPE x [<!ENTITY e "` + ticket + `">]><x>&e;</x>`,
		``,
		`<`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parseResponse(body, ticket)
		if err == nil {
			if p.User == "" || p.User != strings.TrimSpace(p.User) {
				t.Fatalf("success with user %q", p.User)
			}
			if p.Attributes == nil {
				t.Fatal("success with nil attributes")
			}
			return
		}
		var ce *Error
		if !errors.As(err, &ce) && !errors.Is(err, ErrBadAnswer) {
			t.Fatalf("error %v is neither an *Error nor ErrBadAnswer", err)
		}
		if strings.Contains(err.Error(), ticket) {
			t.Fatalf("error %q quotes the ticket", err)
		}
	})
}
