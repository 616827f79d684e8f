package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/cas"
	"github.com/campus-it/ucs/pkg/keys"
	"github.com/campus-it/ucs/pkg/metrics"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/pkg/store"
)

// SignInStore keeps the browser side of sign-in; *store.Store implements it.
type SignInStore interface {
	FinishAuthRequest(ctx context.Context, id string, expires time.Time) error
	AuthRequestFinished(ctx context.Context, id string) (bool, error)
	Session(ctx context.Context, key string) (store.Session, error)
	// Consent returns the scopes userID consented to grant clientID, registered at
	// registered (a consent from before counts for nothing).
	Consent(ctx context.Context, userID, clientID string, registered time.Time) ([]string, error)
	PutConsent(ctx context.Context, userID, clientID string, scopes []string, registered time.Time) error
}

// SignIn configures the authorization code flow's browser side. Without it the authorization
// endpoint shows an error page.
type SignIn struct {
	Store SignInStore
	// Requests seals authorization requests into the flow's URLs: nothing is stored for a
	// request until someone signs in to it.
	Requests *oauth.Sealer
	// Logouts seals the confirmation form of a logout.
	Logouts *oauth.Sealer
	// Directory checks passwords of the local provider; nil: local sign-in is off.
	Directory *oauth.Directory
	// CAS is the campus single sign-on; nil: off.
	CAS *cas.Client
	// DefaultIDP is the provider used when kc_idp_hint is absent: "cas" or "local".
	DefaultIDP string
	// SessionTTL is the longest a sign-in session lasts.
	SessionTTL time.Duration
	// PublicURL is the front end's public address; cookies are Secure when it is https.
	PublicURL string
}

const (
	cookieSession = "UCS_SESSION"
	// cookieBrowser binds a sign-in to the browser it began in, over the whole site (newFlow).
	cookieBrowser = "UCS_BROWSER_ID"
	// authRequestTTL is how long a user may take to sign in and consent.
	authRequestTTL = 10 * time.Minute
)

func (s *Server) realmPath() string { return "/auth/realms/" + s.cfg.Realm }

func (s *Server) signInRoutes() {
	r := s.realmPath()
	oidc := r + "/protocol/openid-connect"
	s.e.GET(oidc+"/auth", s.authorize, browserPage)
	s.e.POST(oidc+"/auth", s.authorize, browserPage, identityBody)
	s.e.POST(r+"/login-actions/authenticate", s.loginLocal, browserPage, identityBody)
	s.e.POST(r+"/login-actions/consent", s.consent, browserPage, identityBody)
	s.e.GET(r+"/login-actions/authenticate", s.stepOpened, browserPage)
	s.e.GET(r+"/login-actions/consent", s.stepOpened, browserPage)
	s.getOnce(r+"/broker/cas/endpoint", s.casCallback, browserPage)
	s.getOnce(r+"/login-actions/signed-in", s.casSignedIn, browserPage)
	s.e.GET(oidc+"/userinfo", s.userinfo, s.userinfoBearer)
	s.e.POST(oidc+"/userinfo", s.userinfo, identityBody, formBearer, s.userinfoBearer)
	s.getOnce(oidc+"/logout", s.logout, browserPage)
	s.e.POST(oidc+"/logout", s.logout, browserPage, identityBody)
	s.e.POST(oidc+"/revoke", s.revoke)
	s.e.POST(oidc+"/token/introspect", s.introspect)
	s.accountRoutes()
}

// page renders an HTML page with the security headers; formActions are origins its form may
// post to besides this service.
func (s *Server) page(c echo.Context, status int, render func(b *bytes.Buffer, nonce string) error, formActions ...string) error {
	nonce := pages.NewNonce()
	var buf bytes.Buffer
	if err := render(&buf, nonce); err != nil {
		return &Error{Code: CodeInternal, Message: "internal error", Internal: err}
	}
	pages.Headers(c.Response().Header(), nonce, formActions...)
	return c.HTMLBlob(status, buf.Bytes())
}

// casFormActions is what form-action must allow, besides the service itself, for a form whose
// answer may redirect to the campus single sign-on (a new sign-in, or its logout): Chromium
// checks the redirects that answer a form against it. Empty without the campus sign-on.
func (s *Server) casFormActions() []string {
	if s.cfg.SignIn == nil || s.cfg.SignIn.CAS == nil {
		return nil
	}
	return []string{s.cfg.SignIn.CAS.LogoutURL("")}
}

// errorPage is the answer when the client's redirect address cannot be trusted: never a
// redirect.
func (s *Server) errorPage(c echo.Context, status int, title, msg, code string) error {
	return s.page(c, status, func(b *bytes.Buffer, nonce string) error {
		return pages.Error(b, pages.ErrorData{Title: title, Message: msg, Code: code, Nonce: nonce})
	})
}

func (s *Server) secureCookies() bool {
	return s.cfg.SignIn != nil && strings.HasPrefix(s.cfg.SignIn.PublicURL, "https://")
}

func (s *Server) setCookie(c echo.Context, name, value string, maxAge time.Duration) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: value, Path: s.realmPath() + "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: s.secureCookies(), MaxAge: int(maxAge / time.Second),
	})
}

func (s *Server) clearCookie(c echo.Context, name string) {
	c.SetCookie(&http.Cookie{Name: name, Value: "", Path: s.realmPath() + "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: s.secureCookies(), MaxAge: -1})
}

func cookieValue(c echo.Context, name string) string {
	ck, err := c.Cookie(name)
	if err != nil {
		return ""
	}
	return ck.Value
}

// requestParams reads the authorization request from the query (GET) or the form (POST).
func requestParams(c echo.Context) url.Values {
	if c.Request().Method == http.MethodPost {
		c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, maxFormBytes)
		if err := c.Request().ParseForm(); err == nil {
			return c.Request().PostForm
		}
		return url.Values{}
	}
	return c.QueryParams()
}

// againAsGet answers a POST to the OpenID Connect endpoint (auth, logout) that came from a
// client's page on another site, which carries none of this server's cookies (SameSite=Lax):
// 303 to the same request as a GET, a top-level navigation, which carries them.
// A client secret posted with it is left out: it would travel in a URL, into access logs.
func (s *Server) againAsGet(c echo.Context, endpoint string, q url.Values) error {
	q = maps.Clone(q)
	q.Del("client_secret")
	return c.Redirect(http.StatusSeeOther, s.realmPath()+"/protocol/openid-connect/"+endpoint+"?"+q.Encode())
}

// authorize is the authorization endpoint: oauth parses and validates the request; this
// adapts the answer to the browser (an error page, or back to the client) and runs the flow.
func (s *Server) authorize(c echo.Context) error {
	si := s.cfg.SignIn
	q := requestParams(c)
	if c.Request().Method == http.MethodPost && cookieValue(c, cookieSession) == "" && cookieValue(c, cookieBrowser) == "" {
		// Taken as it came, a signed-in user would be taken for one signed out, and the
		// browser given a new sign-in cookie.
		return s.againAsGet(c, "auth", q)
	}
	req := oauth.ParseAuthRequest(q)
	idps, defaultIDP := s.identityProviders()
	hint := req.IDP
	_, e := oauth.ValidateAuthRequest(&req, s.cfg.OAuth.Clients, idps, defaultIDP)
	if e == nil && hint != "" && hint != req.IDP {
		s.log.Info("sign-in: kc_idp_hint names no identity provider of this server; the default one signs in",
			"client", req.ClientID, "hint", hint[:min(len(hint), 64)], "provider", req.IDP)
	}
	ar := store.AuthRequest{
		ClientID: req.ClientID, RedirectURI: req.RedirectURI, ResponseMode: req.ResponseMode, State: req.State,
		Nonce: req.Nonce, Scope: req.Scope, CodeChallenge: req.CodeChallenge, IDP: req.IDP, Prompt: req.Prompt,
	}
	if req.MaxAge >= 0 {
		ar.MaxAge = &req.MaxAge
	}
	if req.CodeChallenge != "" {
		ar.CodeChallengeMethod = "S256"
	}
	switch {
	case e != nil && e.Redirect:
		return s.redirectError(c, ar, e.Code, e.Description)
	case e != nil:
		return s.errorPage(c, http.StatusBadRequest, pageTitles[e.Code], "应用发来的登录请求有误，无法继续。 "+sentence(e.Description), e.Code)
	}
	if client, ok := s.cfg.OAuth.Clients.Lookup(ar.ClientID); ok {
		ar.Registered = client.Registered
	}
	s.newFlow(c, &ar)
	if req.IDTokenHint != "" {
		hint, err := s.cfg.OAuth.ParseIDToken(req.IDTokenHint)
		switch {
		case errors.Is(err, keys.ErrUnknownKey):
			// Signed by a key retired since (the ID token of a session renewed past two
			// rotations): read as no hint, as the logout reads it.
		case err != nil:
			return s.redirectError(c, ar, oauth.ErrInvalidRequest, "id_token_hint is not an ID token of this server")
		default:
			ar.Hint = hint.Subject
		}
	}
	now, ctx := s.now(), c.Request().Context()
	cookie := cookieValue(c, cookieSession)
	se, err := si.Store.Session(ctx, oauth.Hash(cookie))
	if err != nil && !errors.Is(err, store.ErrNotFound) && cookie != "" {
		// The store cannot say whether this browser's user is signed in: that is not "not
		// signed in" (login_required would make a relying party end its own session of the
		// user), but this server's trouble, which the client may try again.
		s.log.Error("sign-in: the session could not be read", "err", err)
		return s.redirectError(c, ar, oauth.ErrTemporarilyUnavailable, "the sign-in session could not be read; try again in a moment")
	}
	// The hint names who the client expects: another user signed in here is not them.
	otherUser := err == nil && ar.Hint != "" && ar.Hint != se.UserID
	signedIn := err == nil && req.SignInFresh(se.AuthTime, now) && !otherUser
	switch {
	case signedIn && !oauth.PromptHas(ar.Prompt, "login"):
		// Signed in already: a second authorization in the same session skips the login.
		return s.afterLogin(c, ar, se)
	case ar.Prompt == "none":
		return s.redirectError(c, ar, oauth.ErrLoginRequired, "the user is not signed in and prompt=none forbids asking")
	}
	// A request for a new sign-in (prompt=login), for one no older than max_age, or for
	// another user than the one signed in here, is not met by the campus sign-on's single
	// sign-on, whose sign-in may be of any age and is likely that user's: the user signs in
	// there again.
	ar.Renew = oauth.PromptHas(ar.Prompt, "login") || req.MaxAge >= 0 || otherUser
	return s.startLogin(c, ar, "")
}

// identityProviders are the providers users sign in with here, and the default one.
func (s *Server) identityProviders() (idps []string, defaultIDP string) {
	si := s.cfg.SignIn
	if si == nil {
		return nil, ""
	}
	if si.Directory != nil {
		idps = append(idps, "local")
	}
	if si.CAS != nil {
		idps = append(idps, "cas")
	}
	return idps, si.DefaultIDP
}

// pageTitles are the error pages' titles of the authorization endpoint's errors that are shown
// rather than sent back to the client.
var pageTitles = map[string]string{
	oauth.ErrInvalidRequest:     "无效的请求 Invalid request",
	oauth.ErrInvalidClient:      "无效的客户端 Unknown client",
	oauth.ErrInvalidRedirectURI: "无效的回调地址 Invalid redirect_uri",
}

// sentence writes a protocol error's description as a sentence for a page; one that starts
// with a parameter's name keeps it as it is spelt.
func sentence(desc string) string {
	first, _, _ := strings.Cut(desc, " ")
	if desc == "" || strings.Contains(first, "_") {
		return desc + "."
	}
	return strings.ToUpper(desc[:1]) + desc[1:] + "."
}

// newFlow gives a sign-in its kind, its id, its CSRF value and its lifetime, and binds it to
// this browser (a cookie set now, whose hash it keeps).
func (s *Server) newFlow(c echo.Context, ar *store.AuthRequest) {
	browser := cookieValue(c, cookieBrowser)
	if browser == "" {
		browser = oauth.NewSecret()
	}
	// The whole site's, unlike the other cookies: a sign-in begun from the binding page
	// (/bind/signin) must find the value a sign-in open in another tab is bound to, not make
	// another in its place.
	c.SetCookie(&http.Cookie{Name: cookieBrowser, Value: browser, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: s.secureCookies()})
	now := s.now()
	switch {
	case ar.Bind != "":
		ar.Flow = store.FlowBind
	case ar.Account:
		ar.Flow = store.FlowAccount
	default:
		ar.Flow = store.FlowClient
	}
	ar.ID, ar.CSRF, ar.Browser = oauth.NewSecret()[:22], oauth.NewSecret()[:22], oauth.Hash(browser)
	ar.At, ar.Expires = now, now.Add(authRequestTTL)
}

func (s *Server) casService(ar store.AuthRequest) (string, error) {
	req, err := s.cfg.SignIn.Requests.Seal(ar)
	return s.cfg.SignIn.PublicURL + s.realmPath() + "/broker/cas/endpoint?req=" + req, err
}

// flowURL is the address of a step of the flow, carrying the sealed request.
func (s *Server) flowURL(step string, ar store.AuthRequest) (string, error) {
	req, err := s.cfg.SignIn.Requests.Seal(ar)
	return s.realmPath() + "/login-actions/" + step + "?req=" + req, err
}

// startSignIn starts a sign-in of this service's own (the account or operations page, the
// binding page) at the identity provider that the query parameter hint names, or the default:
// as at the authorization endpoint, a hint naming no provider on offer is only a hint.
func (s *Server) startSignIn(c echo.Context, hint string, ar store.AuthRequest) error {
	idps, idp := s.identityProviders()
	if h := c.QueryParam(hint); slices.Contains(idps, h) {
		idp = h
	} else if h != "" {
		s.log.Info("sign-in: "+hint+" names no identity provider of this server; the default one signs in",
			"hint", h[:min(len(h), 64)], "provider", idp)
	}
	if !slices.Contains(idps, idp) {
		return s.errorPage(c, http.StatusServiceUnavailable, "暂不可用 Unavailable",
			"本服务未配置登录方式。 Sign-in is not configured on this server.", "temporarily_unavailable")
	}
	ar.IDP = idp
	s.newFlow(c, &ar)
	return s.startLogin(c, ar, "")
}

// startLogin sends the user to the request's identity provider.
func (s *Server) startLogin(c echo.Context, ar store.AuthRequest, failure string) error {
	if ar.IDP == "cas" {
		service, err := s.casService(ar)
		if err != nil {
			return s.redirectErrorInternal(c, ar, err)
		}
		return c.Redirect(http.StatusFound, s.cfg.SignIn.CAS.LoginURL(service, ar.Renew))
	}
	action, err := s.flowURL("authenticate", ar)
	if err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	status := http.StatusOK
	if failure != "" {
		status = http.StatusUnauthorized
	}
	var formActions []string
	if ar.RedirectURI != "" {
		formActions = append(formActions, ar.RedirectURI) // the form's answer redirects to the client, which form-action must allow
	}
	return s.page(c, status, func(b *bytes.Buffer, nonce string) error {
		return pages.Login(b, pages.LoginData{
			Action: action,
			CSRF:   ar.CSRF, Client: ar.ClientID, Error: failure, Username: c.Request().PostForm.Get("username"), Nonce: nonce,
		})
	}, formActions...)
}

// flowRequest loads the authorization request a step of the flow belongs to, and checks that
// the step comes from the browser that started it and, for forms, carries its CSRF token.
// When ok is false the request has been answered (an error page) and the handler must return
// err at once: nothing after a refusal may run.
func (s *Server) flowRequest(c echo.Context, form bool) (ar store.AuthRequest, ok bool, err error) {
	ar, ok = s.sealedRequest(c)
	if !ok {
		return ar, false, s.expiredPage(c)
	}
	if !fromBrowser(c, ar) || (form && (c.FormValue("csrf") == "" || !sameSecret(c.FormValue("csrf"), ar.CSRF))) {
		s.securityEvent(c, metrics.EventCSRFRefused, "sign-in step refused: not from the sign-in page of this browser",
			"client", ar.ClientID, "path", c.Path())
		return ar, false, s.errorPage(c, http.StatusForbidden, "请求无效 Request refused",
			"此表单并非来自本浏览器中的登录页面。 This form did not come from the sign-in page of this browser.", "csrf")
	}
	return ar, true, nil
}

// sealedRequest opens the authorization request a step's address carries; false when there is
// none, it expired, or it is of no known kind (sealed before kinds were recorded: start
// again). A front end without sign-in began no flow.
func (s *Server) sealedRequest(c echo.Context) (ar store.AuthRequest, ok bool) {
	ok = s.cfg.SignIn != nil && s.cfg.SignIn.Requests.Open(c.QueryParam("req"), &ar) == nil && s.now().Before(ar.Expires) && knownFlow(ar)
	return ar, ok
}

// fromBrowser reports whether the request ar was started in this browser.
func fromBrowser(c echo.Context, ar store.AuthRequest) bool {
	return sameSecret(oauth.Hash(cookieValue(c, cookieBrowser)), ar.Browser)
}

// knownFlow reports whether ar is of a kind of flow this service runs, as its kind says.
func knownFlow(ar store.AuthRequest) bool {
	switch ar.Flow {
	case store.FlowClient:
		return ar.Bind == "" && !ar.Account
	case store.FlowAccount:
		return ar.Bind == "" && ar.Account
	case store.FlowBind:
		return ar.Bind != "" && !ar.Account
	}
	return false
}

// sameSecret compares two secrets in constant time.
func sameSecret(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// stepOpened answers a step's form address opened as a page (the address bar after a wrong
// password): the sign-in of its request again, as Keycloak shows the flow's page, or the
// expired page for a request already finished or opened in another browser; never the data
// interfaces' JSON.
func (s *Server) stepOpened(c echo.Context) error {
	ar, ok, err := s.openedRequest(c)
	if !ok {
		return err
	}
	if done, err := s.finishedBefore(c, ar); done {
		return err
	}
	ar.Passed, ar.Session = nil, ""
	return s.startLogin(c, ar, "")
}

// openedRequest is flowRequest for an address opened as a page: no form was posted, so one
// opened in another browser (a link copied, WeChat's "open in browser") is no forgery but a
// sign-in this browser cannot go on with, answered with the expired page.
func (s *Server) openedRequest(c echo.Context) (ar store.AuthRequest, ok bool, err error) {
	if ar, ok = s.sealedRequest(c); !ok || !fromBrowser(c, ar) {
		return ar, false, s.expiredPage(c)
	}
	return ar, true, nil
}

// finishedBefore answers a step of ar when ar was answered already (the expired page) or the
// store cannot tell: done reports that it answered, with err the handler's result.
func (s *Server) finishedBefore(c echo.Context, ar store.AuthRequest) (done bool, err error) {
	switch finished, err := s.cfg.SignIn.Store.AuthRequestFinished(c.Request().Context(), ar.ID); {
	case err != nil:
		return true, s.redirectErrorInternal(c, ar, err)
	case finished:
		return true, s.expiredPage(c)
	}
	return false, nil
}

// expiredPage answers a sign-in step that can no longer go on.
func (s *Server) expiredPage(c echo.Context) error {
	return s.errorPage(c, http.StatusBadRequest, "登录已过期 Sign-in expired",
		"此次登录用时过长或已经完成，请返回应用重新开始。 This sign-in took too long or was already finished. Go back to the application and start again.", "expired")
}

// loginLocal takes the built-in login form.
func (s *Server) loginLocal(c echo.Context) error {
	c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, maxFormBytes)
	ar, ok, err := s.flowRequest(c, true)
	if !ok {
		return err
	}
	if ar.IDP != "local" || s.cfg.SignIn.Directory == nil {
		return s.errorPage(c, http.StatusBadRequest, "请求无效 Request refused", "此次登录不使用登录表单。 This sign-in does not use the login form.", "invalid_request")
	}
	// A finished request's form posted again (Back and the browser's resubmission, on a shared
	// computer after its user signed out) has no password checked and signs no one in.
	if done, err := s.finishedBefore(c, ar); done {
		return err
	}
	user := strings.TrimSpace(c.FormValue("username"))
	// Keycloak's brute-force detection locks a user, never an address: a locked user gets the
	// same answer as a wrong password, and the password is checked all the same (no timing
	// tells them apart). An address that fails too often is slowed (429) before any check.
	ctx, g, addr, dir := c.Request().Context(), s.cfg.OAuth.Guard, c.RealIP(), s.cfg.SignIn.Directory
	if e := g.Slowed(ctx, addr); e != nil {
		return s.tooManyPage(c, e)
	}
	known := dir.Exists(user)
	if ok, blocked := checkPassword(ctx, g, dir, known, user, c.FormValue("password")); !ok || blocked {
		// A name that is no user's is not logged: it may be a password typed in the wrong field.
		shown := notAUser
		if known {
			shown = loggedName(user)
		}
		if blocked {
			s.securityEvent(c, metrics.EventLoginFailed, "sign-in refused: blocked after repeated failures",
				"user", shown, "client", ar.ClientID, "idp", "local")
		} else {
			s.securityEvent(c, metrics.EventLoginFailed, "sign-in refused: wrong user number or password",
				"user", shown, "client", ar.ClientID, "idp", "local")
		}
		if e := g.AddressFailed(ctx, addr); e != nil {
			return s.tooManyPage(c, e)
		}
		return s.startLogin(c, ar, "学工号或密码错误 Wrong user number or password")
	}
	se, err := s.newSession(c, sessionCookie(ar), user, "local", s.now())
	if err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	return s.afterLogin(c, ar, se)
}

// checkPassword checks password of user, known to the directory or not, against brute-force
// detection: whether it is right, and whether the user is locked (then a right one does not
// sign in). A user of the directory has the attempt counted before the check, so that guesses
// sent at once cannot pass the lock, and forgotten if the password is right; a made-up name has
// its (absent) record read.
func checkPassword(ctx context.Context, g *oauth.Guard, dir *oauth.Directory, known bool, user, password string) (ok, blocked bool) {
	if !known {
		blocked = g.UserLocked(ctx, user)
		return dir.Check(user, password), blocked
	}
	blocked = g.UserAttempt(ctx, user)
	if ok = dir.Check(user, password); ok && !blocked {
		g.UserSucceeded(ctx, user)
	}
	return ok, blocked
}

// casCallback is where the campus single sign-on returns with a service ticket.
func (s *Server) casCallback(c echo.Context) error {
	ar, ok, err := s.flowRequest(c, false)
	if !ok {
		return err
	}
	if ar.IDP != "cas" || s.cfg.SignIn.CAS == nil {
		return s.errorPage(c, http.StatusBadRequest, "请求无效 Request refused", "此次登录不使用校园统一身份认证。 This sign-in does not use the campus single sign-on.", "invalid_request")
	}
	// Each ticket costs a call to the campus sign-on: an address that fails too often is slowed
	// (429) before one is made, as at the login form.
	g, addr := s.cfg.OAuth.Guard, c.RealIP()
	if e := g.Slowed(c.Request().Context(), addr); e != nil {
		return s.tooManyPage(c, e)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 15*time.Second)
	defer cancel()
	// The service address must be the one the ticket was issued for: the request as it came.
	service := s.cfg.SignIn.PublicURL + s.realmPath() + "/broker/cas/endpoint?req=" + c.QueryParam("req")
	validate := s.cfg.SignIn.CAS.Validate
	if ar.Renew {
		validate = s.cfg.SignIn.CAS.ValidateRenewed
	}
	p, err := validate(ctx, c.QueryParam("ticket"), service)
	if err != nil {
		// The error names no ticket: package cas redacts it from whatever the server said.
		s.securityEvent(c, metrics.EventLoginFailed, "sign-in refused: the campus sign-on did not confirm the ticket",
			"client", ar.ClientID, "idp", "cas", "err", err)
		// A ticket refused (or not a ticket at all) counts against the address; the campus
		// sign-on failing does not, as it is no one's guess.
		if ce, refused := errors.AsType[*cas.Error](err); refused && ce.Code != cas.CodeInternalError || errors.Is(err, cas.ErrMalformedTicket) {
			if e := g.AddressFailed(ctx, addr); e != nil {
				return s.tooManyPage(c, e)
			}
		}
		return s.errorPage(c, http.StatusUnauthorized, "统一身份认证失败 Campus sign-on failed",
			"校园统一身份认证未确认您的登录，请返回应用重试。 The campus single sign-on did not confirm your sign-in. Go back to the application and try again.", "access_denied")
	}
	// A single sign-on answer (no password typed now) keeps the time of the user's last real
	// authentication at the campus sign-on: auth_time and max_age speak of that.
	authTime := p.AuthenticatedAt(s.now())
	if ar.Renew {
		authTime = s.now() // the user signed in again just now, as asked
	}
	se, err := s.newSession(c, sessionCookie(ar), p.User, "cas", authTime)
	if err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	// The ticket is used up: the browser goes on at an address without it, which a reload or
	// the back button opens again (the consent page), where the ticket's would be refused.
	ar.Passed, ar.Session = append(slices.Clone(ar.Passed), store.StepLogin), se.Key
	next, err := s.flowURL("signed-in", ar)
	if err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	return c.Redirect(http.StatusSeeOther, next)
}

// casSignedIn goes on with a request whose user the campus sign-on just confirmed (casCallback
// sends the browser here): the consent page, or the answer to the client or page that asked.
// Opened again, it answers the same while the request is not finished and the session that
// signed in is this browser's.
func (s *Server) casSignedIn(c echo.Context) error {
	ar, ok, err := s.openedRequest(c)
	if !ok {
		return err
	}
	key := oauth.Hash(cookieValue(c, sessionCookie(ar)))
	if !slices.Contains(ar.Passed, store.StepLogin) || !sameSecret(key, ar.Session) {
		return s.expiredPage(c)
	}
	ctx := c.Request().Context()
	if done, err := s.finishedBefore(c, ar); done {
		return err
	}
	se, err := s.cfg.SignIn.Store.Session(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return s.expiredPage(c) // signed out, or ended, since
	case err != nil:
		return s.redirectErrorInternal(c, ar, err)
	}
	return s.afterLogin(c, ar, se)
}

// signInCookie is the value of the cookie of this browser's sign-in that a logout ends: the
// realm's session, or else the binding page's sign-in (endSession ends both), which a logout
// confirms as it confirms the realm's.
func signInCookie(c echo.Context) string {
	if v := cookieValue(c, cookieSession); v != "" {
		return v
	}
	return cookieValue(c, cookieBindSignIn)
}

// sessionCookie is the cookie that names the session of ar's sign-in: the binding page's own
// (cookieBindSignIn), or the realm's.
func sessionCookie(ar store.AuthRequest) string {
	if ar.Flow == store.FlowBind {
		return cookieBindSignIn
	}
	return cookieSession
}

// newSession records a sign-in of userID through idp in this browser, authenticated at
// authTime: its session, renewed if the browser has one of the same user under the cookie name
// (oauth.Service.SignIn), and the cookie that names it.
func (s *Server) newSession(c echo.Context, name, userID, idp string, authTime time.Time) (store.Session, error) {
	secret := oauth.NewSecret()
	now := s.now()
	se := store.Session{
		Key: oauth.Hash(secret), SID: oauth.NewSecret()[:22], UserID: userID, IDP: idp,
		AuthTime: authTime, Expires: now.Add(s.cfg.SignIn.SessionTTL), At: now,
		Address: c.RealIP(), Agent: userAgent(c.Request().UserAgent()),
	}
	se.Idle = s.cfg.OAuth.IdleEnd(se)
	var current string
	cookie := cookieValue(c, name)
	if cookie != "" {
		current = oauth.Hash(cookie)
	}
	se, isNew, err := s.cfg.OAuth.SignIn(c.Request().Context(), current, se)
	if err != nil {
		return se, err
	}
	if isNew {
		cookie = secret
	}
	s.setCookie(c, name, cookie, s.cfg.SignIn.SessionTTL)
	return se, nil
}

// afterLogin asks for consent where it is needed, else answers the client.
func (s *Server) afterLogin(c echo.Context, ar store.AuthRequest, se store.Session) error {
	switch ar.Flow {
	case store.FlowBind:
		if s.cfg.Bind == nil {
			// A replica without the binding page: the sign-in has nowhere to go.
			return s.redirectError(c, ar, oauth.ErrTemporarilyUnavailable, "binding is not configured on this server")
		}
		return s.bindAfterLogin(c, ar, se)
	case store.FlowAccount:
		if ok, err := s.finishOnce(c, ar); !ok {
			return err
		}
		if ar.Return != "" {
			return c.Redirect(http.StatusSeeOther, ar.Return)
		}
		return c.Redirect(http.StatusSeeOther, s.accountPath())
	}
	client, ok := s.cfg.OAuth.Clients.Lookup(ar.ClientID)
	if !ok || registeredAgain(ar, client) {
		return s.clientGone(c)
	}
	if ar.Hint != "" && se.UserID != ar.Hint {
		// Another user than the one the client's id_token_hint names signed in (OpenID
		// Connect Core 3.1.2.1): no code for them.
		return s.redirectError(c, ar, oauth.ErrLoginRequired, "the user signed in is not the one id_token_hint names")
	}
	if !oauth.ConsentNeeded(client, ar.Scope, ar.Prompt, nil) {
		return s.finish(c, ar, se) // nothing to consent to, or the client skips consent
	}
	granted, err := s.cfg.SignIn.Store.Consent(c.Request().Context(), se.UserID, ar.ClientID, client.Registered)
	if err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	if !oauth.ConsentNeeded(client, ar.Scope, ar.Prompt, granted) {
		return s.finish(c, ar, se)
	}
	want := oauth.ConsentScopes(ar.Scope)
	if !oauth.PromptHas(ar.Prompt, "consent") {
		// Only what the user has not granted yet is asked (prompt=consent asks for it all).
		want = slices.DeleteFunc(want, func(sc string) bool { return slices.Contains(granted, sc) })
	}
	if ar.Prompt == "none" {
		return s.redirectError(c, ar, oauth.ErrConsentRequired, "the user has not consented and prompt=none forbids asking")
	}
	// The consent step takes only this request as it is now: signed in, by this session, which
	// does not end idle while the user may still answer.
	if !slices.Contains(ar.Passed, store.StepLogin) {
		ar.Passed = append(slices.Clone(ar.Passed), store.StepLogin)
	}
	ar.Session = se.Key
	s.cfg.OAuth.Hold(c.Request().Context(), se, ar.ID, ar.Expires)
	action, err := s.flowURL("consent", ar)
	if err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	texts := make([]pages.ScopeText, 0, len(want))
	for _, sc := range want {
		texts = append(texts, pages.DescribeScope(sc))
	}
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		return pages.Consent(b, pages.ConsentData{
			Action: action,
			CSRF:   ar.CSRF, Client: ar.ClientID, UserID: se.UserID, Scopes: texts, Nonce: nonce,
		})
	}, append(s.casFormActions(), ar.RedirectURI)...) // the answer goes to the client, or to a new sign-in past max_age
}

// registeredAgain reports whether client is another registration under the id of ar's client
// (deleted and created again since the request began). The registration times are compared as
// the store keeps them, not with a front end's clock.
func registeredAgain(ar store.AuthRequest, client *oauth.Client) bool {
	return !ar.Registered.IsZero() && !ar.Registered.Equal(client.Registered)
}

// clientGone answers a sign-in whose client was deleted or disabled since it began, or
// registered again (another application under the same id, which the user was not asked about
// and whose redirect URIs may differ).
func (s *Server) clientGone(c echo.Context) error {
	return s.errorPage(c, http.StatusBadRequest, "应用不可用 Application unavailable",
		"此应用已不再注册，请返回应用重新开始。 This application is no longer registered. Go back to it and start again.", "unauthorized_client")
}

// consent takes the consent form.
func (s *Server) consent(c echo.Context) error {
	c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, maxFormBytes)
	ar, ok, err := s.flowRequest(c, true)
	if !ok {
		return err
	}
	// Consent follows a sign-in to a client's request, in the session that signed in: a request
	// that has not passed the login step (prompt=login or max_age asked for a new sign-in), or
	// one of the account or binding page, never reaches it.
	if ar.Flow != store.FlowClient || !slices.Contains(ar.Passed, store.StepLogin) || ar.Session == "" {
		s.securityEvent(c, metrics.EventCSRFRefused, "consent refused: the sign-in step of this request was not passed",
			"client", ar.ClientID, "flow", ar.Flow)
		return s.errorPage(c, http.StatusBadRequest, "请求无效 Request refused",
			"此次登录尚未到授权确认这一步，请返回应用重新开始。 This sign-in has not reached the consent step. Go back to the application and start again.", "invalid_request")
	}
	ctx := c.Request().Context()
	key := oauth.Hash(cookieValue(c, cookieSession))
	se, err := s.cfg.SignIn.Store.Session(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		// Not an ended session: the same form is taken once the store answers.
		return &Error{Code: CodeUnavailable, Message: "the sign-in session could not be read; try again", Internal: err}
	}
	if err != nil || !sameSecret(key, ar.Session) {
		return s.errorPage(c, http.StatusBadRequest, "登录已过期 Sign-in expired", "您的登录已结束，请返回应用重新开始。 Your sign-in session ended. Go back to the application and start again.", "expired")
	}
	if c.FormValue("accept") == "" {
		if ok, err := s.finishOnce(c, ar); !ok {
			return err
		}
		s.cfg.OAuth.Release(ctx, se, ar.ID) // the page no longer waits
		return s.redirectError(c, ar, oauth.ErrAccessDenied, "the user refused consent")
	}
	if ar.MaxAge != nil && se.AuthTime.Before(ar.At) && !oauth.FreshFor(*ar.MaxAge, se.AuthTime, s.now()) {
		// A sign-in from before this request that grew older than max_age while the consent
		// page was open answers it no longer: the user signs in again, then consents.
		ar.Passed, ar.Session, ar.Renew = nil, "", true
		return s.startLogin(c, ar, "")
	}
	client, ok := s.cfg.OAuth.Clients.Lookup(ar.ClientID)
	if !ok || registeredAgain(ar, client) {
		return s.clientGone(c) // nothing is recorded
	}
	// The request is answered once: a form of one answered already (denied, or allowed and
	// posted again) records nothing.
	if ok, err := s.finishOnce(c, ar); !ok {
		return err
	}
	if err := s.cfg.SignIn.Store.PutConsent(ctx, se.UserID, ar.ClientID, oauth.ConsentScopes(ar.Scope), client.Registered); err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	return s.issue(c, ar, se)
}

// finish issues the code and sends the browser back to the client, once (finishOnce).
func (s *Server) finish(c echo.Context, ar store.AuthRequest, se store.Session) error {
	if ok, err := s.finishOnce(c, ar); !ok {
		return err
	}
	return s.issue(c, ar, se)
}

// issue issues the code of ar, answered, and sends the browser back to the client. Answering
// the authorization is a use of the session: its idle end moves on, past the code's lifetime;
// one that held the session for its consent page (ar.Session) ends the hold.
func (s *Server) issue(c echo.Context, ar store.AuthRequest, se store.Session) error {
	ctx := c.Request().Context()
	if ar.Session == se.Key {
		s.cfg.OAuth.Release(ctx, se, ar.ID)
	} else {
		s.cfg.OAuth.Touch(ctx, se)
	}
	code, err := s.cfg.OAuth.IssueCode(ctx, oauth.CodeGrant{
		ClientID: ar.ClientID, RedirectURI: ar.RedirectURI, Nonce: ar.Nonce, Scope: ar.Scope, CodeChallenge: ar.CodeChallenge,
		UserID: se.UserID, SessionKey: se.Key, SID: se.SID, AuthTime: se.AuthTime,
	})
	if err != nil {
		return s.redirectErrorInternal(c, ar, err)
	}
	return s.respond(c, ar, []pages.Field{{Name: "code", Value: code}, {Name: "state", Value: ar.State},
		{Name: "session_state", Value: se.SID}, {Name: "iss", Value: s.cfg.OAuth.Issuer}})
}

// finishOnce records that ar is answered; a request answered before gets the expired page
// (ok false: the handler returns err at once).
func (s *Server) finishOnce(c echo.Context, ar store.AuthRequest) (ok bool, err error) {
	switch err := s.cfg.SignIn.Store.FinishAuthRequest(c.Request().Context(), ar.ID, ar.Expires); {
	case errors.Is(err, store.ErrReplayed):
		return false, s.errorPage(c, http.StatusBadRequest, "登录已过期 Sign-in expired",
			"此次登录已经完成，请返回应用重新开始。 This sign-in was already finished. Go back to the application and start again.", "expired")
	case err != nil:
		return false, s.redirectErrorInternal(c, ar, err)
	}
	return true, nil
}

func (s *Server) redirectError(c echo.Context, ar store.AuthRequest, code, desc string) error {
	if ar.Account || ar.Bind != "" {
		// A sign-in to the account or binding page has no client to send an error to.
		again := "请重新打开账户页面。 The sign-in could not be completed. Open the account page again."
		if ar.Bind != "" {
			again = "请从公众号菜单重新打开绑定页面。 The sign-in could not be completed. Open the binding page again from the official account's menu."
		}
		return s.errorPage(c, http.StatusServiceUnavailable, "出错了 Something went wrong", "未能完成登录，"+again, code)
	}
	return s.respond(c, ar, []pages.Field{{Name: "error", Value: code}, {Name: "error_description", Value: oauth.Description(desc)},
		{Name: "state", Value: ar.State}, {Name: "iss", Value: s.cfg.OAuth.Issuer}})
}

func (s *Server) redirectErrorInternal(c echo.Context, ar store.AuthRequest, err error) error {
	s.log.Error("sign-in step failed", "client", ar.ClientID, "err", err)
	return s.redirectError(c, ar, oauth.ErrServerError, "the sign-in could not be completed; try again")
}

// backToClient is the status of the redirect back to the client: 303 See Other after a form
// posted (the password, the consent), which a browser follows with a GET and never posts
// again to the client's address (RFC 9700 §4.12); 302 Found after a GET, as Keycloak answers.
func backToClient(c echo.Context) int {
	if c.Request().Method == http.MethodPost {
		return http.StatusSeeOther
	}
	return http.StatusFound
}

// respond sends fields to the client's (already verified) redirect_uri in the response mode
// it asked for.
func (s *Server) respond(c echo.Context, ar store.AuthRequest, fields []pages.Field) error {
	v := url.Values{}
	var kept []pages.Field
	for _, f := range fields {
		if f.Value != "" {
			v.Add(f.Name, f.Value)
			kept = append(kept, f)
		}
	}
	switch ar.ResponseMode {
	case "form_post":
		return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
			return pages.FormPost(b, pages.FormPostData{Action: ar.RedirectURI, Fields: kept, Nonce: nonce})
		}, ar.RedirectURI)
	case "fragment":
		return c.Redirect(backToClient(c), ar.RedirectURI+"#"+v.Encode())
	}
	return c.Redirect(backToClient(c), withQuery(ar.RedirectURI, v))
}

// withQuery is the address target with the parameters v added to its query.
func withQuery(target string, v url.Values) string {
	if strings.Contains(target, "?") {
		return target + "&" + v.Encode()
	}
	return target + "?" + v.Encode()
}

// formBearer takes the access token from a form body (RFC 6750 §2.2) into the Authorization
// header the bearer check reads. A token in both places is refused (§2: one method only), in
// OAuth's shape, as RFC 6750 §3.1's invalid_request.
func formBearer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/x-www-form-urlencoded") {
			return next(c)
		}
		malformed := func(desc string) error {
			c.Response().Header().Set("WWW-Authenticate", `Bearer error="invalid_request"`)
			return c.JSON(http.StatusBadRequest, &oauth.Error{Code: oauth.ErrInvalidRequest, Description: desc})
		}
		if problem := formProblem(c); problem != "" {
			return malformed(problem)
		}
		tok, ok := r.PostForm["access_token"]
		switch {
		case !ok:
		case len(tok) != 1 || r.Header.Get("Authorization") != "":
			// A malformed request, not a refused token: 400 (RFC 6750 §3.1).
			return malformed("give the access token once, in one place")
		default:
			r.Header.Set("Authorization", "Bearer "+tok[0])
		}
		return next(c)
	}
}

// userinfo answers who the user of an access token is.
func (s *Server) userinfo(c echo.Context) error {
	cl := claimsOf(c)
	out := map[string]any{"sub": cl.Subject}
	if cl.UserID != "" {
		out["userid"], out["preferred_username"] = cl.UserID, cl.UserID
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, out)
}

// logoutConfirmation is what the confirmation form of a logout carries, sealed: the session
// it ends and where the browser goes then.
type logoutConfirmation struct {
	Session string    `json:"session"`
	Target  string    `json:"target,omitempty"`
	State   string    `json:"state,omitempty"`
	Expires time.Time `json:"expires"`
}

// logout ends the sign-in session (and with it its tokens); oauth.Service.ParseLogout checks
// the request. Without id_token_hint the user confirms with a form, so that a link or an image
// on another site signs no one out; so does a hint of another session than the browser's. A
// hint without a session cookie ends the session it names. A POST with a client's credentials
// and refresh_token is the client's own logout (clientLogout). No refused request ends
// anything, and no address that is not registered is ever redirected to.
func (s *Server) logout(c echo.Context) error {
	q := requestParams(c)
	if c.Request().Method == http.MethodPost && q.Has("confirm") && !oauth.Repeated(q) {
		return s.logoutConfirmed(c, q.Get("confirm"))
	}
	if c.Request().Method == http.MethodPost && (q.Has("refresh_token") || q.Has("client_secret") || c.Request().Header.Get("Authorization") != "") {
		// A client's own logout, Keycloak's back-channel one: credentials are a client's, never
		// a browser's (one without a refresh token is refused, and its secret goes nowhere).
		return s.clientLogout(c)
	}
	lr, e := s.cfg.OAuth.ParseLogout(q)
	if e != nil {
		title := "无效的请求 Invalid request"
		if e.Code == oauth.ErrInvalidRedirectURI {
			title = "无效的回调地址 Invalid redirect address"
		}
		return s.errorPage(c, http.StatusBadRequest, title, "应用发来的退出请求有误，无法继续。 "+e.Description, e.Code)
	}
	idc, target := lr.Hint, lr.Target
	key := cookieValue(c, cookieSession)
	if idc == nil {
		// The binding page's sign-in is no application's session: a hint never names it, and
		// only a logout without one confirms on it (endSession ends it with any).
		key = signInCookie(c)
	}
	if key == "" && idc == nil && s.cfg.SignIn != nil && c.Request().Method == http.MethodPost {
		// The user confirms on the GET.
		return s.againAsGet(c, "logout", q)
	}
	if key == "" || s.cfg.SignIn == nil {
		if idc == nil && target == "" {
			// Nothing to end and nowhere to go: the signed-out page (also where the campus
			// sign-on's logout returns to when no application asked for a return).
			return s.signedOutPage(c)
		}
		if idc != nil && s.cfg.SignIn != nil {
			// No session cookie (a cross-site POST does not carry it): the hint names the
			// session to end, as Keycloak ends it.
			if err := s.cfg.OAuth.EndUserSession(c.Request().Context(), idc.Subject, idc.SID); err != nil && !errors.Is(err, oauth.ErrNotYours) {
				return &Error{Code: CodeUnavailable, Message: "sign-out could not be recorded; try again", Internal: err}
			}
		}
		return s.endSession(c, target, lr.State)
	}
	confirm := lr.Confirm
	if idc != nil {
		se, err := s.cfg.SignIn.Store.Session(c.Request().Context(), oauth.Hash(key))
		switch {
		case err == nil:
			// A hint of another session or another user is no word of this browser's user:
			// they confirm.
			confirm = !sameSecret(idc.SID, se.SID) || idc.Subject != se.UserID
		case errors.Is(err, store.ErrNotFound):
			// This browser's session is over already: the hint's is the one to end.
			if err := s.cfg.OAuth.EndUserSession(c.Request().Context(), idc.Subject, idc.SID); err != nil && !errors.Is(err, oauth.ErrNotYours) {
				return &Error{Code: CodeUnavailable, Message: "sign-out could not be recorded; try again", Internal: err}
			}
		default:
			return &Error{Code: CodeUnavailable, Message: "sign-out could not be recorded; try again", Internal: err}
		}
	}
	if confirm {
		return s.confirmLogout(c, logoutConfirmation{Session: oauth.Hash(key), Target: target, State: lr.State})
	}
	return s.endSession(c, target, lr.State)
}

// clientLogout is Keycloak's logout by a client's back end (what python-keycloak's logout()
// sends): the client authenticates and names the session by one of its refresh tokens; that
// session ends, with every token of it, and the answer is 204. Errors are OAuth's, in JSON.
func (s *Server) clientLogout(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	req, ok, err := s.clientRequest(c)
	if !ok {
		return err
	}
	if e := s.cfg.OAuth.LogoutClient(c.Request().Context(), req); e != nil {
		return s.oauthError(c, e)
	}
	return c.NoContent(http.StatusNoContent)
}

// confirmLogout shows the confirmation form of a logout.
func (s *Server) confirmLogout(c echo.Context, lc logoutConfirmation) error {
	lc.Expires = s.now().Add(authRequestTTL)
	sealed, err := s.cfg.SignIn.Logouts.Seal(lc)
	if err != nil {
		return &Error{Code: CodeInternal, Message: "internal error", Internal: err}
	}
	var formActions []string
	if lc.Target != "" {
		formActions = append(formActions, lc.Target) // the form's answer redirects there, which form-action must allow
	}
	formActions = append(formActions, s.casFormActions()...) // or through the campus sign-on's logout
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		return pages.LogoutConfirm(b, pages.LogoutConfirmData{
			Action: s.realmPath() + "/protocol/openid-connect/logout", Confirm: sealed, Nonce: nonce})
	}, formActions...)
}

// logoutConfirmed takes the confirmation form: it ends the session it was shown for, in the
// browser it was shown in.
func (s *Server) logoutConfirmed(c echo.Context, sealed string) error {
	var lc logoutConfirmation
	if s.cfg.SignIn == nil || s.cfg.SignIn.Logouts.Open(sealed, &lc) != nil || !s.now().Before(lc.Expires) ||
		!sameSecret(oauth.Hash(signInCookie(c)), lc.Session) {
		return s.errorPage(c, http.StatusBadRequest, "请求无效 Request refused",
			"此退出表单已过期，或并非来自本浏览器。 This sign-out form expired or did not come from this browser.", "invalid_request")
	}
	return s.endSession(c, lc.Target, lc.State)
}

// endSession ends the browser's session and returns to target (already checked) or shows the
// signed-out page. With the campus single sign-on configured, the browser goes through its
// logout, which sends it on to target or to this service's signed-out page, as Keycloak's CAS
// broker does for a session signed in through it. It does so for every sign-out, whatever the
// session this browser holds here says: a sign-out by id_token_hint from another site's form
// carries no cookie, this service's session may have expired before the application's, and a
// local sign-in may have renewed a campus one; the campus session may live on in each case,
// and the next person at a shared computer would be signed in as the last one, with no
// password asked. A browser with no campus session passes through its logout unchanged.
func (s *Server) endSession(c echo.Context, target, state string) error {
	// The binding page's sign-in too, should the browser hold one: signing out ends every
	// sign-in of this browser.
	for _, name := range []string{cookieSession, cookieBindSignIn} {
		if key := cookieValue(c, name); key != "" && s.cfg.SignIn != nil {
			if err := s.cfg.OAuth.EndSession(c.Request().Context(), oauth.Hash(key)); err != nil {
				return &Error{Code: CodeUnavailable, Message: "sign-out could not be recorded; try again", Internal: err}
			}
		}
		s.clearCookie(c, name)
	}
	if cookieValue(c, cookieBrowser) != "" {
		// A new browser value: a sign-in or consent form opened before the sign-out (the Back
		// button, a resubmitted post on a shared computer) is no longer this browser's, and
		// signs no one in.
		c.SetCookie(&http.Cookie{Name: cookieBrowser, Value: oauth.NewSecret(), Path: "/", HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Secure: s.secureCookies()})
	}
	if target != "" && state != "" {
		target = withQuery(target, url.Values{"state": {state}})
	}
	if s.cfg.SignIn != nil && s.cfg.SignIn.CAS != nil {
		if target == "" {
			// The logout endpoint, without the session cookie now, shows the signed-out page.
			target = s.cfg.OAuth.Issuer + "/protocol/openid-connect/logout"
		}
		return c.Redirect(http.StatusFound, s.cfg.SignIn.CAS.LogoutURL(target))
	}
	if target == "" {
		return s.signedOutPage(c)
	}
	return c.Redirect(http.StatusFound, target)
}

// signedOutPage is the page of a browser signed out.
func (s *Server) signedOutPage(c echo.Context) error {
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		return pages.LoggedOut(b, pages.LoggedOutData{Nonce: nonce})
	})
}

// clientRequest reads a token, revocation, introspection or client logout request: its form,
// the client's HTTP Basic credentials and the source address. On a bad request (a form it
// cannot read, a parameter given more than once) it answers the OAuth error itself and returns
// ok false.
func (s *Server) clientRequest(c echo.Context) (oauth.ClientRequest, bool, error) {
	r := c.Request()
	if !identityEncoding(r.Header) {
		// RFC 9110 §15.5.16: 415, naming the codings that would do.
		c.Response().Header().Set("Accept-Encoding", "identity")
		return oauth.ClientRequest{}, false, s.oauthError(c, &oauth.Error{Code: oauth.ErrInvalidRequest,
			Description: "Content-Encoding is not supported: send the form uncompressed", Status: http.StatusUnsupportedMediaType})
	}
	if !strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/x-www-form-urlencoded") {
		return oauth.ClientRequest{}, false, s.oauthError(c, &oauth.Error{Code: oauth.ErrInvalidRequest, Description: "the body must be application/x-www-form-urlencoded", Status: 400})
	}
	if problem := formProblem(c); problem != "" {
		return oauth.ClientRequest{}, false, s.oauthError(c, &oauth.Error{Code: oauth.ErrInvalidRequest, Description: problem, Status: 400})
	}
	if oauth.Repeated(r.PostForm) {
		// RFC 6749 §3.2, which RFC 7009 and RFC 7662 build on: a parameter is given once.
		return oauth.ClientRequest{}, false, s.oauthError(c, &oauth.Error{Code: oauth.ErrInvalidRequest, Description: "a parameter is given more than once", Status: 400})
	}
	if len(r.Header.Values("Authorization")) > 1 {
		return oauth.ClientRequest{}, false, s.oauthError(c, &oauth.Error{Code: oauth.ErrInvalidRequest, Description: "the Authorization header is given more than once", Status: 400})
	}
	id, sec, basic := r.BasicAuth()
	return oauth.ClientRequest{Form: r.PostForm, BasicID: id, BasicSecret: sec, Basic: basic, Addr: c.RealIP()}, true, nil
}

// revoke is RFC 7009 token revocation.
func (s *Server) revoke(c echo.Context) error {
	req, ok, err := s.clientRequest(c)
	if !ok {
		return err
	}
	if e := s.cfg.OAuth.Revoke(c.Request().Context(), req); e != nil {
		return s.oauthError(c, e)
	}
	return c.NoContent(http.StatusOK)
}

// introspect is RFC 7662 token introspection.
func (s *Server) introspect(c echo.Context) error {
	req, ok, err := s.clientRequest(c)
	if !ok {
		return err
	}
	out, e := s.cfg.OAuth.Introspect(c.Request().Context(), req)
	if e != nil {
		return s.oauthError(c, e)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, out)
}

// userAgent keeps what the account page needs of a User-Agent to tell sessions apart: at most
// 160 characters, printable ASCII.
func userAgent(ua string) string {
	ua = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, ua)
	if len(ua) > 160 {
		ua = ua[:160]
	}
	return ua
}
