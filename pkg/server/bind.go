package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// The binding page ({public_url}/bind): a student opens it from the official account's menu in
// the platform's in-app browser and binds their campus user number to the follower they are.
//
//  1. GET /bind without a bind session: the platform's silent web authorization (snsapi_base),
//     with a state kept in a sealed cookie; the platform returns to /bind/platform with a code,
//     which the server alone exchanges for the openid. The openid is kept in the sealed
//     (encrypted and authenticated) bind cookie: the browser can neither read nor choose it.
//  2. The campus sign-in (CAS or the local directory) of the sign-in flow, whose end hands the
//     user number back to /bind/signed-in, sealed and tied to this bind session.
//  3. Consent to bind and receive notifications (a form with a value derived from the bind
//     session), then the binding is stored and shown; the same page unbinds. The user number
//     counts only while the sign-in that gave it lives: signed out since, on this phone or
//     everywhere from the account page, the student is asked to sign in again.

// BindStore keeps bindings; *store.Store implements it.
type BindStore interface {
	Binding(ctx context.Context, userID string) (store.Binding, error)
	BindingOf(ctx context.Context, openID string) (store.Binding, error)
	Bind(ctx context.Context, userID, openID string) (replaced string, err error)
	Unbind(ctx context.Context, userID, openID string) error
	// TakeOnce records the one use of a single-use value; store.ErrReplayed when it was used.
	TakeOnce(ctx context.Context, key string, expires time.Time) error
}

// WebAuth is the platform's web authorization; *platform.WebAuth implements it.
type WebAuth interface {
	AuthorizeURL(redirectURI, state string) string
	OpenID(ctx context.Context, code string) (string, error)
}

// Bind configures the binding page; it needs SignIn too. Without it /bind answers that binding
// is not available.
type Bind struct {
	Store    BindStore
	Platform WebAuth
	// Sessions seals the bind cookie; Tickets the sign-in's hand-back of the user number.
	Sessions, Tickets *oauth.Sealer
	// Changed, when set, is told of every user number whose binding changed, so that workers
	// forget what they cached of it.
	Changed func(userID string)
}

const (
	cookieBind = "UCS_BIND"
	// cookieBindSignIn names the session of a sign-in started from the binding page, in place
	// of the realm's session cookie: a student signs in on a borrowed phone as often as on their
	// own, and a sign-in whose consent is never answered (the phone handed back, the in-app
	// browser closed) must not open the account page, or sign in to applications, as the
	// student. Only the binding reads it (sessionCookie).
	cookieBindSignIn = "UCS_BIND_SIGNIN"
	// bindAuthTTL bounds the platform's authorization, from the redirect to its return.
	bindAuthTTL = 10 * time.Minute
	// bindSessionTTL bounds a bind session once the follower is known: after it the page asks
	// the platform again (silently, in the in-app browser).
	bindSessionTTL = 30 * time.Minute
	// bindTicketTTL bounds the hand-back of a finished sign-in to the page.
	bindTicketTTL = 2 * time.Minute
)

// bindSession is what the bind cookie holds, sealed.
type bindSession struct {
	// ID names the session; sign-ins started from it carry its hash.
	ID string `json:"id"`
	// State is the platform authorization's state while it runs.
	State string `json:"state,omitempty"`
	// OpenID is the follower, as the platform's answer to the server said.
	OpenID string `json:"openid,omitempty"`
	// UserID is the campus user number once the student signed in here, and SignIn the key
	// of that sign-in's session, which must still live for the user number to count.
	UserID  string    `json:"userid,omitempty"`
	SignIn  string    `json:"signin,omitempty"`
	Expires time.Time `json:"expires"`
}

// bindTicket hands a finished campus sign-in back to the bind session it was started from.
type bindTicket struct {
	// ID names the ticket, which is taken once.
	ID      string    `json:"id"`
	Bind    string    `json:"bind"` // hash of the bind session's ID
	UserID  string    `json:"userid"`
	SignIn  string    `json:"signin"` // the key of the sign-in's session
	Expires time.Time `json:"expires"`
}

// bindNotices are the outcomes the page reports, by the done parameter; nothing else of that
// parameter reaches the page.
var bindNotices = map[string]string{
	"bound":     "绑定成功，您将通过公众号收到校园通知。 Bound: you will receive campus notifications through the official account.",
	"unbound":   "已解除绑定。 Unbound: no more notifications reach this WeChat account.",
	"cancelled": "已取消，未做任何更改。 Cancelled: nothing was changed.",
}

// bindProviders are the sign-in buttons of the page, by identity provider.
var bindProviders = map[string]pages.BindProvider{
	"cas":   {ZH: "统一身份认证登录", EN: "Sign in with the campus single sign-on"},
	"local": {ZH: "校园账号登录", EN: "Sign in with your campus account"},
}

func (s *Server) bindRoutes() {
	on := []echo.MiddlewareFunc{browserPage, s.bindAvailable}
	s.e.GET("/bind", s.bindPage, on...)
	s.e.POST("/bind", s.bindConsent, on...)
	s.getOnce("/bind/platform", s.bindPlatformReturn, on...)
	s.e.GET("/bind/signin", s.bindSignIn, on...)
	s.getOnce("/bind/signed-in", s.bindSignedIn, on...)
	s.e.POST("/bind/unbind", s.bindUnbind, on...)
	// The unbind form's address opened as a page shows the binding page.
	s.e.GET("/bind/unbind", func(c echo.Context) error { return c.Redirect(http.StatusSeeOther, "/bind") }, on...)
}

// bindAvailable answers every path of the page that binding is not available where it is not
// configured.
func (s *Server) bindAvailable(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if idps, _ := s.identityProviders(); s.cfg.Bind == nil || len(idps) == 0 {
			return s.errorPage(c, http.StatusNotFound, "未开放 Not available",
				"本服务未开启公众号绑定。 Binding to the official account is not configured on this server.", "temporarily_unavailable")
		}
		return next(c)
	}
}

// bindSessionOf opens the browser's bind cookie; ok false when there is none that is live.
func (s *Server) bindSessionOf(c echo.Context) (bs bindSession, ok bool) {
	v := cookieValue(c, cookieBind)
	if v == "" || s.cfg.Bind.Sessions.Open(v, &bs) != nil || bs.ID == "" || !s.now().Before(bs.Expires) {
		return bindSession{}, false
	}
	return bs, true
}

func (s *Server) setBindSession(c echo.Context, bs bindSession) error {
	v, err := s.cfg.Bind.Sessions.Seal(bs)
	if err != nil {
		return &Error{Code: CodeInternal, Message: "internal error", Internal: err}
	}
	c.SetCookie(&http.Cookie{Name: cookieBind, Value: v, Path: "/bind", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: s.secureCookies(), MaxAge: int(bs.Expires.Sub(s.now()) / time.Second)})
	return nil
}

// bindCSRF is the value the page's forms carry: derived from the bind session, which only this
// browser holds (sealed in its cookie), so another site can neither read nor forge it.
func bindCSRF(bs bindSession) string { return oauth.Hash("bind-form\x00" + bs.ID)[:32] }

// bindPage shows the page: after the platform's authorization when the follower is not known.
func (s *Server) bindPage(c echo.Context) error {
	bs, ok := s.bindSessionOf(c)
	if !ok || bs.OpenID == "" {
		return s.bindAuthorize(c)
	}
	ctx := c.Request().Context()
	d := pages.BindData{
		Follower: shortOpenID(bs.OpenID), Notice: bindNotices[c.QueryParam("done")], CSRF: bindCSRF(bs),
		Action: "/bind", UnbindAction: "/bind/unbind",
	}
	switch b, err := s.cfg.Bind.Store.BindingOf(ctx, bs.OpenID); {
	case err == nil:
		d.State, d.UserID, d.Since, d.Following = pages.BindBound, b.UserID, s.local(b.Updated), b.Following
	case !errors.Is(err, store.ErrNotFound):
		return &Error{Code: CodeUnavailable, Message: "the binding could not be read; try again", Internal: err}
	case bs.UserID != "":
		switch live, err := s.bindSignedInLive(ctx, bs); {
		case err != nil:
			return &Error{Code: CodeUnavailable, Message: "the sign-in could not be checked; try again", Internal: err}
		case !live:
			// Signed out since (here, or everywhere from the account page), or the sign-in
			// ended: its user number counts no more, and the page asks for a sign-in again.
			bs.UserID, bs.SignIn = "", ""
			if err := s.setBindSession(c, bs); err != nil {
				return err
			}
			return c.Redirect(http.StatusSeeOther, "/bind")
		}
		d.State, d.UserID = pages.BindConsent, bs.UserID
		switch mine, err := s.cfg.Bind.Store.Binding(ctx, bs.UserID); {
		case err == nil:
			d.ElsewhereBound = mine.OpenID != bs.OpenID
		case !errors.Is(err, store.ErrNotFound):
			return &Error{Code: CodeUnavailable, Message: "the binding could not be read; try again", Internal: err}
		}
	default:
		d.State = pages.BindSignIn
		idps, def := s.identityProviders()
		for _, idp := range idps {
			p := bindProviders[idp]
			p.URL = "/bind/signin?idp=" + idp
			if idp == def {
				d.Providers = slices.Insert(d.Providers, 0, p) // the default provider first
			} else {
				d.Providers = append(d.Providers, p)
			}
		}
	}
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		d.Nonce = nonce
		return pages.Bind(b, d)
	}, s.casFormActions()...) // the consent's answer goes through the campus sign-on's logout
}

// bindAuthorize starts the platform's web authorization in a new bind session.
func (s *Server) bindAuthorize(c echo.Context) error {
	bs := bindSession{ID: oauth.NewSecret()[:22], State: oauth.Hash(oauth.NewSecret())[:32], Expires: s.now().Add(bindAuthTTL)}
	if err := s.setBindSession(c, bs); err != nil {
		return err
	}
	return c.Redirect(http.StatusFound, s.cfg.Bind.Platform.AuthorizeURL(s.cfg.SignIn.PublicURL+"/bind/platform", bs.State))
}

// bindPlatformReturn is where the platform sends the browser back with a code: the state must
// be this browser's, and the openid comes only from the server's exchange of the code.
func (s *Server) bindPlatformReturn(c echo.Context) error {
	bs, ok := s.bindSessionOf(c)
	if !ok || bs.State == "" || !sameSecret(c.QueryParam("state"), bs.State) {
		s.securityEvent(c, metrics.EventCSRFRefused, "binding refused: the platform's answer does not belong to this browser's authorization")
		return s.errorPage(c, http.StatusBadRequest, "请求无效 Request refused",
			"此应答不属于本浏览器发起的授权，请从公众号菜单重新打开页面。 This answer does not belong to an authorization started in this browser. Open the page again from the official account's menu.", "invalid_state")
	}
	// Each code costs a call to the platform on the official account's credentials: an address
	// whose codes are refused too often is slowed (429) before one is made, as at the campus
	// sign-on's return.
	g, addr := s.cfg.OAuth.Guard, c.RealIP()
	if e := g.Slowed(c.Request().Context(), addr); e != nil {
		return s.tooManyPage(c, e)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 15*time.Second)
	defer cancel()
	openID, err := s.cfg.Bind.Platform.OpenID(ctx, c.QueryParam("code"))
	if errors.Is(err, platform.ErrSnapshotUser) {
		// A page opened from a Moments snapshot has a virtual openid, of no follower: nothing
		// to bind. The bind cookie is cleared so a reload starts over.
		s.log.Info("binding: refused a snapshot page's virtual openid", "addr", c.RealIP())
		c.SetCookie(&http.Cookie{Name: cookieBind, Value: "", Path: "/bind", HttpOnly: true, SameSite: http.SameSiteLaxMode,
			Secure: s.secureCookies(), MaxAge: -1})
		return s.errorPage(c, http.StatusForbidden, "请在公众号中打开 Open this page from the official account",
			"此页面是从朋友圈快照打开的，微信不会告知您的身份。请关注公众号，并从其菜单打开绑定页面。 This page was opened from a Moments snapshot, where WeChat does not say who you are. Follow the official account and open the binding page from its menu.",
			"snapshot_user")
	}
	if err != nil {
		var pe *platform.Error
		if platform.CodeRefused(err) && errors.As(err, &pe) {
			// The code itself is never logged: it is a credential until it is used.
			s.log.Warn("binding: the platform refused the authorization code", "errcode", pe.Code, "addr", addr)
			if e := g.AddressFailed(ctx, addr); e != nil {
				return s.tooManyPage(c, e)
			}
			return s.errorPage(c, http.StatusBadRequest, "微信授权失败 WeChat authorization failed",
				"微信未能确认您的身份（链接可能已用过或已过期），请从公众号菜单重新打开页面。 The platform did not confirm who you are (the link may have been used already or expired). Open the page again from the official account's menu.",
				"platform_"+strconv.Itoa(pe.Code))
		}
		// The platform busy (-1), or the official account's credentials refused: neither the
		// link's fault nor the student's, whose address is not charged for it.
		s.log.Error("binding: the platform's web authorization failed", "err", err)
		return s.errorPage(c, http.StatusBadGateway, "微信授权失败 WeChat authorization failed",
			"暂时无法连接微信，请稍后再试。 The platform could not be reached. Try again in a moment.", "temporarily_unavailable")
	}
	// The state is taken once, by the first code the platform confirmed: a replayed cookie of
	// this authorization lets no second code in.
	if ok, err := s.bindTakeOnce(c, "bindstate."+bs.State, bs.Expires); !ok {
		return err
	}
	// A new session id: nothing started before the follower was known carries over.
	next := bindSession{ID: oauth.NewSecret()[:22], OpenID: openID, Expires: s.now().Add(bindSessionTTL)}
	if err := s.setBindSession(c, next); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/bind")
}

// bindSignIn starts the campus sign-in for the bind session.
func (s *Server) bindSignIn(c echo.Context) error {
	bs, ok := s.bindSessionOf(c)
	if !ok || bs.OpenID == "" {
		return c.Redirect(http.StatusSeeOther, "/bind")
	}
	// The campus sign-on asks for the password every time (renew): its single sign-on, in a
	// borrowed phone's in-app browser, outlives this service's sign-out and a Cancel here.
	return s.startSignIn(c, "idp", store.AuthRequest{Bind: oauth.Hash(bs.ID), Renew: true})
}

// bindAfterLogin ends a sign-in started from the binding page: the user number goes back to
// the page sealed, for the bind session the sign-in was started from only.
func (s *Server) bindAfterLogin(c echo.Context, ar store.AuthRequest, se store.Session) error {
	if ok, err := s.finishOnce(c, ar); !ok {
		return err
	}
	t, err := s.cfg.Bind.Tickets.Seal(bindTicket{ID: oauth.NewSecret()[:22], Bind: ar.Bind, UserID: se.UserID, SignIn: se.Key,
		Expires: s.now().Add(bindTicketTTL)})
	if err != nil {
		return &Error{Code: CodeInternal, Message: "internal error", Internal: err}
	}
	if se.IDP == "cas" && s.cfg.SignIn.CAS != nil {
		// The campus sign-on's own session, which its sign-in opened even with renew, ends
		// before the consent is shown: left unanswered on a borrowed phone, it would sign the
		// next person in as the student (the account page, any application) with no password.
		// The ticket it validated is all the binding needs.
		return c.Redirect(http.StatusSeeOther, s.cfg.SignIn.CAS.LogoutURL(s.cfg.SignIn.PublicURL+"/bind/signed-in?t="+t))
	}
	return c.Redirect(http.StatusSeeOther, "/bind/signed-in?t="+t)
}

// bindSignedIn takes the hand-back of a finished sign-in into the bind session.
func (s *Server) bindSignedIn(c echo.Context) error {
	bs, ok := s.bindSessionOf(c)
	var t bindTicket
	if !ok || bs.OpenID == "" || s.cfg.Bind.Tickets.Open(c.QueryParam("t"), &t) != nil || !s.now().Before(t.Expires) ||
		t.ID == "" || !sameSecret(t.Bind, oauth.Hash(bs.ID)) {
		s.securityEvent(c, metrics.EventCSRFRefused, "binding refused: a sign-in handed back to another browser's binding page")
		return s.errorPage(c, http.StatusBadRequest, "登录已过期 Sign-in expired",
			"此次登录并非从本浏览器的绑定页面发起，或用时过长，请从公众号菜单重新打开页面。 This sign-in did not start from the binding page of this browser, or took too long. Open the page again from the official account's menu.", "expired")
	}
	// The ticket is taken once: replayed after the consent, it would bind again with no sign-in.
	if ok, err := s.bindTakeOnce(c, "bindticket."+t.ID, t.Expires); !ok {
		return err
	}
	if !push.ValidUserID(t.UserID) {
		// A sign-in may name anything; a push names 1 to 64 of A-Z a-z 0-9 . _ -: a binding
		// of this user number could never carry a message.
		return s.errorPage(c, http.StatusBadRequest, "无法绑定 Cannot bind",
			"您的校园账号的学工号无法在此接收消息（只能包含字母、数字、“.”、“_”和“-”），请联系信息中心服务台。 Your campus account's user number cannot receive messages here (it may hold only letters, digits, '.', '_' and '-'). Ask the IT service desk.", "invalid_user")
	}
	bs.UserID, bs.SignIn = t.UserID, t.SignIn
	if err := s.setBindSession(c, bs); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/bind")
}

// bindForm checks a form of the page: posted from this browser's page of its bind session.
// ok false: refused, the answer is written and the handler returns err at once.
func (s *Server) bindForm(c echo.Context) (bs bindSession, ok bool, err error) {
	c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, maxFormBytes)
	bs, live := s.bindSessionOf(c)
	if !live || bs.OpenID == "" {
		return bs, false, s.errorPage(c, http.StatusForbidden, "页面已过期 Page expired",
			"页面已过期，请从公众号菜单重新打开。 This page expired. Open it again from the official account's menu.", "expired")
	}
	if csrf := c.FormValue("csrf"); csrf == "" || !sameSecret(csrf, bindCSRF(bs)) {
		s.securityEvent(c, metrics.EventCSRFRefused, "binding form refused: not from the binding page of this browser", "path", c.Path())
		return bs, false, s.errorPage(c, http.StatusForbidden, "请求无效 Request refused",
			"此表单并非来自本浏览器中的绑定页面。 This form did not come from the binding page of this browser.", "csrf")
	}
	return bs, true, nil
}

// bindConsent takes the consent form: bind, or cancel.
func (s *Server) bindConsent(c echo.Context) error {
	bs, ok, err := s.bindForm(c)
	if !ok {
		return err
	}
	live, err := s.bindSignedInLive(c.Request().Context(), bs)
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: "the sign-in could not be checked; try again", Internal: err}
	}
	if !live || c.FormValue("userid") != bs.UserID {
		// Signed out meanwhile (the sign-in's session ended), or signed in as someone else
		// in another tab: the page shows who is signed in now, and asks again. Only the user
		// the page showed, still signed in, is bound.
		return c.Redirect(http.StatusSeeOther, "/bind")
	}
	userID, signIn := bs.UserID, bs.SignIn
	bs.UserID, bs.SignIn = "", "" // consent is asked once per sign-in, whatever the answer
	if err := s.setBindSession(c, bs); err != nil {
		return err
	}
	if c.FormValue("accept") == "" {
		return s.bindSignOut(c, signIn, "cancelled")
	}
	replaced, err := s.cfg.Bind.Store.Bind(c.Request().Context(), userID, bs.OpenID)
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: "the binding could not be stored; try again", Internal: err}
	}
	s.log.Info("binding: bound", "user", userID)
	s.bindChanged(userID, replaced)
	return s.bindSignOut(c, signIn, "bound")
}

// bindSignOut ends the sign-in that served the binding (its session, whose cookie hashes to
// key, and the campus sign-on's) and shows the page's outcome done. A student binds on a
// borrowed phone as often as on their own: the sign-in must not stay behind in its browser for
// the next person.
func (s *Server) bindSignOut(c echo.Context, key, done string) error {
	if err := s.cfg.OAuth.EndSession(c.Request().Context(), key); err != nil {
		// The cookie goes all the same: without it this browser holds nothing.
		s.log.Warn("binding: the sign-in's session could not be ended; it ends idle", "err", err)
	}
	s.clearCookie(c, cookieBindSignIn)
	if s.cfg.SignIn.CAS != nil {
		return c.Redirect(http.StatusSeeOther, s.cfg.SignIn.CAS.LogoutURL(s.cfg.SignIn.PublicURL+"/bind?done="+done))
	}
	return c.Redirect(http.StatusSeeOther, "/bind?done="+done)
}

// bindUnbind takes the unbind form: the follower's binding ends.
func (s *Server) bindUnbind(c echo.Context) error {
	bs, ok, err := s.bindForm(c)
	if !ok {
		return err
	}
	ctx := c.Request().Context()
	b, err := s.cfg.Bind.Store.BindingOf(ctx, bs.OpenID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return c.Redirect(http.StatusSeeOther, "/bind?done=unbound") // already unbound
	case err != nil:
		return &Error{Code: CodeUnavailable, Message: "the binding could not be read; try again", Internal: err}
	}
	if err := s.cfg.Bind.Store.Unbind(ctx, b.UserID, bs.OpenID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return &Error{Code: CodeUnavailable, Message: "the binding could not be removed; try again", Internal: err}
	}
	s.log.Info("binding: unbound", "user", b.UserID)
	s.bindChanged(b.UserID, "")
	bs.UserID = ""
	if err := s.setBindSession(c, bs); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/bind?done=unbound")
}

// bindSignedInLive reports whether bs holds a user number whose sign-in still lives: a student
// who signs out (on this phone, or everywhere from the account page) after signing in on a
// borrowed phone's binding page must not be bound to its WeChat account afterwards.
func (s *Server) bindSignedInLive(ctx context.Context, bs bindSession) (bool, error) {
	if bs.UserID == "" || bs.SignIn == "" {
		return false, nil
	}
	switch se, err := s.cfg.SignIn.Store.Session(ctx, bs.SignIn); {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	default:
		return se.UserID == bs.UserID, nil
	}
}

// bindTakeOnce takes a single-use value of the page; ok false: it was used before (the expired
// page is the answer) or the store failed, and the handler returns err at once.
func (s *Server) bindTakeOnce(c echo.Context, key string, expires time.Time) (ok bool, err error) {
	switch err := s.cfg.Bind.Store.TakeOnce(c.Request().Context(), key, expires); {
	case errors.Is(err, store.ErrReplayed):
		s.securityEvent(c, metrics.EventCSRFRefused, "binding refused: a single-use value of the page was used again")
		return false, s.errorPage(c, http.StatusBadRequest, "页面已过期 Page expired",
			"这一步绑定已经用过，请从公众号菜单重新打开页面。 This step of the binding was already used. Open the page again from the official account's menu.", "expired")
	case err != nil:
		return false, &Error{Code: CodeUnavailable, Message: "the binding could not be checked; try again", Internal: err}
	}
	return true, nil
}

func (s *Server) bindChanged(userIDs ...string) {
	if s.cfg.Bind.Changed == nil {
		return
	}
	for _, u := range userIDs {
		if u != "" {
			s.cfg.Bind.Changed(u)
		}
	}
}

// shortOpenID shows enough of an openid for a student to tell two apart, not all of it: the
// page may be seen over a shoulder.
func shortOpenID(id string) string {
	if len(id) <= 10 {
		return id
	}
	return id[:6] + "…" + id[len(id)-4:]
}
