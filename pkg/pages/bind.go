package pages

import (
	"io"
	"time"
)

// bindTmpl is the binding page; parsed at init like the other pages.
var bindTmpl = parse("bind.html")

// BindState is which step the binding page shows.
type BindState int

const (
	// BindSignIn: the follower is known, its openid is bound to no one; the student signs in
	// with the campus account to bind it.
	BindSignIn BindState = iota
	// BindConsent: the student signed in; the page asks consent to bind and receive
	// notifications.
	BindConsent
	// BindBound: the follower is bound; the page shows to whom and offers to unbind.
	BindBound
)

// BindProvider is one way to sign in with the campus account, linked from the page.
type BindProvider struct {
	URL    string // where the link goes (GET starts the sign-in)
	ZH, EN string // the link's words
}

// BindData is what the binding page shows.
type BindData struct {
	State BindState
	// Follower is the follower as shown to the student: their openid, shortened.
	Follower string
	// UserID is the campus user number bound (BindBound) or signed in (BindConsent).
	UserID string
	// Since is when the binding was made; zero for one made before bindings were dated.
	Since time.Time
	// Following is false when the platform said the follower left the account: messages
	// cannot reach them until they follow it again.
	Following bool
	// ElsewhereBound (BindConsent) says that UserID is bound to another follower now, which
	// binding here replaces.
	ElsewhereBound bool
	// Providers (BindSignIn) are the campus sign-ins on offer.
	Providers []BindProvider
	// Notice is the outcome of the last change, "中文 English"; empty for none.
	Notice string
	// Action is where the consent form posts ("accept" or "cancel", and "csrf"); UnbindAction
	// where the unbind form posts ("csrf").
	Action, UnbindAction string
	CSRF                 string // value of the hidden field named "csrf"
	Nonce                string // CSP nonce of the page's <style>; the one given to Headers
}

// Bind writes the binding page (绑定公众号 Bind the official account): the sign-in links, the
// consent form with buttons name="accept" and name="cancel", or the binding with its unbind
// form, as d.State says.
func Bind(w io.Writer, d BindData) error { return render(w, bindTmpl, d) }
