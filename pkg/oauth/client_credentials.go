package oauth

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// clientCredentials is the client credentials grant (RFC 6749 §4.4): a token for the client
// itself, with the scopes it asked for among its own (all of them when it asked for none).
func (s *Service) clientCredentials(client *Client, form url.Values) (*TokenResponse, *Error) {
	grant := GrantClientCredentials
	scope, oerr := grantScope(client, form.Get("scope"), grant)
	if oerr != nil {
		return nil, oerr
	}
	tok, exp, err := s.issueAccessFor(client, grant, "service-account-"+client.ID, "", scope, "", "", s.Now(), time.Time{})
	if err != nil {
		return nil, internal("the token could not be issued", fmt.Errorf("sign access token of %s: %w", client.ID, err))
	}
	return &TokenResponse{
		AccessToken: tok, ExpiresIn: int64(exp / time.Second), TokenType: "Bearer",
		NotBeforePolicy: 0, RefreshExpiresIn: 0, Scope: scope,
	}, nil
}

// grantScope settles the scope of a token: what was asked for, all of which the client must
// be allowed, or when nothing was asked, everything the client is allowed. openid is meaningful
// only with a user, so a client credentials token leaves it out unless asked for it.
func grantScope(c *Client, requested, grant string) (string, *Error) {
	if requested == "" {
		var out []string
		for _, s := range c.Scopes {
			if s == ScopeOpenID && grant == GrantClientCredentials {
				continue
			}
			out = append(out, s)
		}
		return strings.Join(out, " "), nil
	}
	var out []string
	for s := range strings.FieldsSeq(requested) {
		if !c.MayAsk(s) {
			return "", errorf(ErrInvalidScope, "a requested scope is not granted to client %s", c.ID)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, " "), nil
}
