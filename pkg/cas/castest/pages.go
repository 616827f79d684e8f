package castest

import (
	"html/template"
	"net/http"
)

// loginData fills loginPage.
type loginData struct {
	Action   string // where the form posts: /cas/login
	Service  string // the service the user signs in for; may be empty
	Username string // kept after a failed attempt
	LT       string // the login ticket, one use
	Error    string // why the previous attempt failed, if it did
}

// The pages are parsed once; they are constants, not state. The login form
// carries the fields the protocol requires (2.1.3): username, password, lt
// and, when given, service.
var (
	loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Campus single sign-on</title></head>
<body>
<h1>Campus single sign-on</h1>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>
{{end}}<form method="post" action="{{.Action}}">
<label>User number <input type="text" name="username" value="{{.Username}}" autocomplete="username"></label>
<label>Password <input type="password" name="password" autocomplete="current-password"></label>
<input type="hidden" name="lt" value="{{.LT}}">
{{if .Service}}<input type="hidden" name="service" value="{{.Service}}">
{{end}}<button type="submit">Sign in</button>
</form>
</body>
</html>
`))
	signedInPage = template.Must(template.New("signedIn").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Signed in</title></head>
<body><p>You are signed in to the campus single sign-on as {{.}}.</p></body>
</html>
`))
	signedOutPage = template.Must(template.New("signedOut").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Signed out</title></head>
<body><p>You have signed out of the campus single sign-on.</p></body>
</html>
`))
	errorPage = template.Must(template.New("error").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Single sign-on error</title></head>
<body><p class="error" role="alert">{{.}}</p></body>
</html>
`))
)

// render writes page with data. Pages are never cached: they carry login
// tickets and session state.
func render(w http.ResponseWriter, status int, page *template.Template, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// A failed write means the browser has gone; there is no one to tell.
	_ = page.Execute(w, data)
}
