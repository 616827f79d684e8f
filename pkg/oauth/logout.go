package oauth

import (
	"errors"
	"net/url"

	"github.com/campus-it/ucs/pkg/keys"
)

// LogoutRequest is a browser's logout request as ParseLogout checked it.
type LogoutRequest struct {
	// Target is the registered address to return to afterwards, or "" for the signed-out page;
	// State goes back with it.
	Target, State string
	// Hint is the ID token the client named the session by (id_token_hint), nil without one.
	Hint *IDClaims
	// Confirm is whether the user must confirm before the browser's session ends: a request
	// without id_token_hint that names post_logout_redirect_uri, or no address at all. (A hint
	// of another session than the browser's asks for it too; that takes the session to know.)
	Confirm bool
}

// ParseLogout checks a logout request's parameters. The interface's form, redirect_uri alone,
// returns to that address when it is registered, with no confirmation (as Keycloak's legacy
// logout). Otherwise as Keycloak 18 and later: post_logout_redirect_uri needs id_token_hint or
// client_id, and an address registered for that client; id_token_hint must be an ID token this
// service signed. The error, invalid_request or invalid_redirect_uri, is shown to the user:
// nothing is redirected to an address that is not registered.
func (s *Service) ParseLogout(q url.Values) (LogoutRequest, *Error) {
	bad := func(desc string) (LogoutRequest, *Error) {
		return LogoutRequest{}, errorf(ErrInvalidRequest, "%s", desc)
	}
	if Repeated(q) {
		return bad("A parameter is given more than once.")
	}
	postLogout, legacy, hint, clientID := q.Get("post_logout_redirect_uri"), q.Get("redirect_uri"), q.Get("id_token_hint"), q.Get("client_id")
	lr := LogoutRequest{Target: postLogout, State: q.Get("state")}
	if hint != "" {
		idc, err := s.ParseIDToken(hint)
		switch {
		case errors.Is(err, keys.ErrUnknownKey):
			// Signed by a key retired since: the ID token of a session renewed past two
			// rotations (its application kept the first). Nothing of it can be trusted: the
			// logout goes on as one without a hint, which the user confirms, returning to
			// post_logout_redirect_uri only when client_id names its application.
			hint = ""
			if clientID == "" {
				postLogout, lr.Target = "", ""
			}
		case err != nil:
			return bad("id_token_hint is not an ID token of this server.")
		case clientID != "" && clientID != idc.Azp:
			return bad("client_id differs from the ID token's client.")
		default:
			lr.Hint, clientID = idc, idc.Azp
		}
	}
	switch {
	case postLogout != "" && clientID == "":
		return bad("post_logout_redirect_uri needs id_token_hint or client_id.")
	case postLogout == "" && legacy != "":
		lr.Target = legacy // the interface's form: no confirmation, as the interface describes
	}
	if lr.Target != "" && !s.logoutTargetAllowed(clientID, lr.Target) {
		return LogoutRequest{}, errorf(ErrInvalidRedirectURI, "The address to return to after signing out is not registered for this application.")
	}
	lr.Confirm = hint == "" && (postLogout != "" || lr.Target == "")
	return lr, nil
}

// logoutTargetAllowed reports whether target is a post-logout address registered for clientID,
// or, without a client, for some client (Registered).
func (s *Service) logoutTargetAllowed(clientID, target string) bool {
	if clientID != "" {
		cl, ok := s.Clients.Lookup(clientID)
		return ok && Registered(cl.PostLogoutRedirectURIs, target)
	}
	return s.Clients.AnyPostLogoutRedirect(target)
}
