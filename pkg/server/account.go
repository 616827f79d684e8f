package server

import (
	"bytes"
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/pkg/store"
)

// The account page ({issuer}/account, as Keycloak's account console): a signed-in user sees the
// applications they have granted and their sign-in sessions, removes an application's access
// and ends sessions. It belongs to the service's own sign-in session (the browser's cookie), so
// it needs no client; a browser that is not signed in is sent through the sign-in first.

func (s *Server) accountPath() string { return s.realmPath() + "/account" }

func (s *Server) accountRoutes() {
	s.e.GET(s.accountPath(), s.account, browserPage)
	s.e.POST(s.accountPath()+"/grants/revoke", s.accountRevoke, browserPage, identityBody)
	s.e.POST(s.accountPath()+"/sessions/end", s.accountEnd, browserPage, identityBody)
	// The forms' addresses opened as pages show the account page.
	toAccount := func(c echo.Context) error { return c.Redirect(http.StatusSeeOther, s.accountPath()) }
	s.e.GET(s.accountPath()+"/grants/revoke", toAccount)
	s.e.GET(s.accountPath()+"/sessions/end", toAccount)
}

// accountNotices are the outcomes the page reports after a change, by the done parameter of
// the address it is sent back to; nothing else of that parameter reaches the page.
var accountNotices = map[string]string{
	"revoked": "已撤销该应用的授权，下次使用时需重新同意。 The application's access is removed; it will ask again next time.",
	"ended":   "会话已结束。 The session has ended.",
	"others":  "其他会话均已结束。 Every other session has ended.",
}

// accountCSRF is the value the account page's forms carry: derived from the session cookie,
// which only this browser holds, so another site can neither read nor forge it.
func accountCSRF(cookie string) string { return oauth.Hash("account-form\x00" + cookie)[:32] }

// accountSession returns the browser's live sign-in session and its cookie; ok false when
// there is none.
func (s *Server) accountSession(c echo.Context) (se store.Session, cookie string, ok bool, err error) {
	if s.cfg.SignIn == nil {
		return se, "", false, nil
	}
	cookie = cookieValue(c, cookieSession)
	if cookie == "" {
		return se, "", false, nil
	}
	se, err = s.cfg.SignIn.Store.Session(c.Request().Context(), oauth.Hash(cookie))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return se, cookie, false, nil
	case err != nil:
		// Not an ended session: the store cannot say (the 503 page, try again).
		return se, cookie, false, &Error{Code: CodeUnavailable, Message: "the sign-in session could not be read; try again", Internal: err}
	}
	return se, cookie, true, nil
}

// account shows the account page, after a sign-in when the browser has no session.
func (s *Server) account(c echo.Context) error {
	if idps, _ := s.identityProviders(); len(idps) == 0 {
		return s.errorPage(c, http.StatusNotFound, "未开放 Not available", "本服务未开启登录。 Sign-in is not configured on this server.", "temporarily_unavailable")
	}
	se, cookie, ok, err := s.accountSession(c)
	if err != nil {
		return err
	}
	if !ok {
		return s.accountSignIn(c)
	}
	ctx := c.Request().Context()
	grants, err := s.cfg.OAuth.Grants(ctx, se.UserID)
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: "the account could not be read; try again", Internal: err}
	}
	sessions, err := s.cfg.OAuth.Sessions(ctx, se.UserID)
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: "the account could not be read; try again", Internal: err}
	}
	d := pages.AccountData{
		UserID: se.UserID, Notice: accountNotices[c.QueryParam("done")], CSRF: accountCSRF(cookie),
		RevokeAction: s.accountPath() + "/grants/revoke", EndAction: s.accountPath() + "/sessions/end",
	}
	for _, g := range grants {
		// What it may do: every scope consented to (a narrower request does not take any
		// back), and those of its latest tokens (an application that needs no consent).
		ag := pages.AccountGrant{Client: g.ClientID, Granted: s.local(g.At), LastUsed: s.local(g.LastUsed)}
		var shown []string
		for _, sc := range append(slices.Clone(g.Scopes), strings.Fields(g.Scope)...) {
			if !oauth.IsStandardScope(sc) && !slices.Contains(shown, sc) {
				shown = append(shown, sc)
				ag.Scopes = append(ag.Scopes, pages.DescribeScope(sc))
			}
		}
		d.Grants = append(d.Grants, ag)
	}
	// This browser's session first, then the others, newest first.
	own := func(x store.Session) int {
		if x.Key == se.Key {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(sessions, func(a, b store.Session) int { return cmp.Compare(own(a), own(b)) })
	for _, x := range sessions {
		d.Sessions = append(d.Sessions, pages.AccountSession{
			SID: x.SID, Current: x.Key == se.Key, Started: s.local(x.AuthTime), Expires: s.local(x.Expires),
			Address: x.Address, Agent: x.Agent, Method: strings.ToUpper(x.IDP),
		})
	}
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		d.Nonce = nonce
		return pages.Account(b, d)
	}, s.casFormActions()...) // signing out of a campus sign-on session goes through its logout
}

// accountSignIn starts a sign-in whose end is the account page rather than a client.
func (s *Server) accountSignIn(c echo.Context) error {
	return s.startSignIn(c, "kc_idp_hint", store.AuthRequest{Account: true})
}

// accountForm checks a form of the account page: posted from this browser's page of its live
// session. ok false: refused, the answer is written and the handler returns err at once.
func (s *Server) accountForm(c echo.Context) (se store.Session, ok bool, err error) {
	c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, maxFormBytes)
	se, cookie, live, err := s.accountSession(c)
	if err != nil {
		return se, false, err
	}
	if !live {
		return se, false, s.errorPage(c, http.StatusForbidden, "登录已过期 Sign-in expired",
			"您的登录已结束，请重新打开账户页面登录。 Your sign-in session ended. Open the account page again to sign in.", "expired")
	}
	if csrf := c.FormValue("csrf"); csrf == "" || !sameSecret(csrf, accountCSRF(cookie)) {
		s.securityEvent(c, metrics.EventCSRFRefused, "account form refused: not from the account page of this browser",
			"user", se.UserID, "path", c.Path())
		return se, false, s.errorPage(c, http.StatusForbidden, "请求无效 Request refused",
			"此表单并非来自本浏览器中的账户页面。 This form did not come from the account page of this browser.", "csrf")
	}
	return se, true, nil
}

// accountRevoke removes an application's access.
func (s *Server) accountRevoke(c echo.Context) error {
	se, ok, err := s.accountForm(c)
	if !ok {
		return err
	}
	switch err := s.cfg.OAuth.RevokeGrant(c.Request().Context(), se.UserID, c.FormValue("client_id")); {
	case errors.Is(err, oauth.ErrNotYours):
		return s.errorPage(c, http.StatusNotFound, "未找到 Not found", "该应用没有您账户的授权。 This application has no access to your account.", "not_found")
	case err != nil:
		return &Error{Code: CodeUnavailable, Message: "the access could not be removed; try again", Internal: err}
	}
	return c.Redirect(http.StatusSeeOther, s.accountPath()+"?done=revoked")
}

// accountEnd ends one session of the user, or every other one (sid "others"). Ending the
// browser's own session signs it out.
func (s *Server) accountEnd(c echo.Context) error {
	se, ok, err := s.accountForm(c)
	if !ok {
		return err
	}
	ctx, sid := c.Request().Context(), c.FormValue("sid")
	if sid == se.SID {
		return s.endSession(c, "", "")
	}
	if sid == "others" {
		sessions, err := s.cfg.OAuth.Sessions(ctx, se.UserID)
		if err != nil {
			return &Error{Code: CodeUnavailable, Message: "the sessions could not be ended; try again", Internal: err}
		}
		for _, x := range sessions {
			if x.Key == se.Key {
				continue
			}
			if err := s.cfg.OAuth.EndUserSession(ctx, se.UserID, x.SID); err != nil && !errors.Is(err, oauth.ErrNotYours) {
				return &Error{Code: CodeUnavailable, Message: "the sessions could not be ended; try again", Internal: err}
			}
		}
		return c.Redirect(http.StatusSeeOther, s.accountPath()+"?done=others")
	}
	switch err := s.cfg.OAuth.EndUserSession(ctx, se.UserID, sid); {
	case errors.Is(err, oauth.ErrNotYours):
		return s.errorPage(c, http.StatusNotFound, "未找到 Not found", "没有这个登录会话，它可能已经结束。 You have no such session: it may have ended already.", "not_found")
	case err != nil:
		return &Error{Code: CodeUnavailable, Message: "the session could not be ended; try again", Internal: err}
	}
	return c.Redirect(http.StatusSeeOther, s.accountPath()+"?done=ended")
}
