package pages

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"time"
)

// The console pages (the operations page, a push's history, the sandbox phones) are for
// operators and developers at a desktop screen, not the sign-in cards of layout.html: they
// share their own wider layout, console.html, with the same colours and security headers.
var (
	opsTmpl     = parseConsole("ops.html")
	historyTmpl = parseConsole("history.html")
	sandboxTmpl = parseConsole("sandbox.html")
)

func parseConsole(page string) *template.Template {
	return template.Must(template.New(page).
		Funcs(template.FuncMap{"when": when, "clock": clock, "stamp": stamp}).
		ParseFS(templateFS, "templates/console.html", "templates/"+page))
}

// clock shows a time of day to the second, in the zone the time carries (see when).
func clock(t time.Time) string { return t.Format("15:04:05") }

// stamp shows a time to the millisecond, as the envelope does, in the zone the time carries.
func stamp(t time.Time) string { return t.Format("2006-01-02 15:04:05.000") }

// renderConsole renders a console page whole before writing it, as render does.
func renderConsole(w io.Writer, t *template.Template, data any) error {
	buf := bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooled {
			bufs.Put(buf)
		}
	}()
	if err := t.ExecuteTemplate(buf, "console", data); err != nil {
		return fmt.Errorf("pages: render %s: %w", t.Name(), err)
	}
	if _, err := buf.WriteTo(w); err != nil {
		return fmt.Errorf("pages: write %s: %w", t.Name(), err)
	}
	return nil
}

// SandboxScript is the script of the sandbox page, served by the front end from its own origin
// (the page's CSP allows it by nonce, and nothing from elsewhere).
//
//go:embed static/sandbox.js
var SandboxScript []byte

// LiveHeaders sets Headers' headers for a page whose script reads data from this origin
// (connect-src 'self'); nothing else is allowed beyond Headers' policy.
func LiveHeaders(h http.Header, nonce string) {
	Headers(h, nonce)
	h.Set("Content-Security-Policy", h.Get("Content-Security-Policy")+"; connect-src 'self'")
}

// OpsData is what the operations page shows.
type OpsData struct {
	UserID  string // the signed-in operator
	SignOut string // where the sign-out link goes
	// Since is when this front end began counting; Now when the page was made.
	Since, Now time.Time
	Counts     []OpsCount
	// Paused reports a pause of sending in force, until PausedUntil, for PauseReason.
	Paused      bool
	PausedUntil time.Time
	PauseReason string
	// PauseAction is what an operator must do, for a refusal of the account (IP whitelist,
	// API permission, credentials); "" for the daily quota, which ends by itself.
	PauseAction string
	Charts      []Chart
	Kinds       []OpsKind
	Failures    []OpsFailure
	// HistoryBase is the address of a push's history, less its ucsId.
	HistoryBase string
	Nonce       string // CSP nonce of the page's <style>; the one given to Headers
}

// OpsCount is one box of the counts by state.
type OpsCount struct {
	State, ZH, EN string
	N             int64
	Unknown       bool // the count could not be had (the queue did not answer)
}

// OpsKind is how many pushes failed for one kind of reason.
type OpsKind struct {
	Kind  string
	Count int64
}

// OpsFailure is one of the latest failures, linked to its history.
type OpsFailure struct {
	UcsID, UserID, Type, Reason string
	At                          time.Time
}

// Ops writes the operations page.
func Ops(w io.Writer, d OpsData) error { return renderConsole(w, opsTmpl, d) }

// HistoryData is what the history page of one push shows.
type HistoryData struct {
	UcsID   string
	Records []HistoryRecord
	// Queue says where the queue has the push, "" when it does not.
	Queue string
	Back  string // the operations page
	Nonce string // CSP nonce of the page's <style>; the one given to Headers
}

// HistoryRecord is one record of a push.
type HistoryRecord struct {
	Kind, KindZH string // final, sent, progress
	Result       HistoryResult
}

// HistoryResult is the content of a record.
type HistoryResult struct {
	State, UserID, Type, ClientID string
	Attempts                      int
	MsgID                         string
	Reason, LastError             string
	Accepted, Sent, Finished      time.Time
	RetryAt, Updated              time.Time
}

// History writes the history page of a push.
func History(w io.Writer, d HistoryData) error { return renderConsole(w, historyTmpl, d) }

// SandboxData is what the sandbox page shows.
type SandboxData struct {
	Phones []Phone `json:"phones"`
	// Version changes whenever anything shown changes, so the script redraws only then.
	Version string `json:"version"`
	Feed    string `json:"-"` // the address the script polls for SandboxData as JSON
	Script  string `json:"-"` // the address of SandboxScript
	Nonce   string `json:"-"` // CSP nonce of the page's <style> and <script>
}

// Phone is one demo user's phone.
type Phone struct {
	UserID   string         `json:"userId"`
	OpenID   string         `json:"openId"`
	Messages []PhoneMessage `json:"messages"`
}

// PhoneMessage is a template message as the phone shows it.
type PhoneMessage struct {
	UcsID string      `json:"ucsId"`
	Title string      `json:"title"`
	At    string      `json:"at"`
	Items []PhoneItem `json:"items"`
	Link  bool        `json:"link"` // the message opens a page ("详情")
	// State is the delivery state (sent, delivered, failed), StateText it in words.
	State     string `json:"state"`
	StateText string `json:"stateText"`
}

// PhoneItem is one keyword line of a message.
type PhoneItem struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Sandbox writes the sandbox page: one phone per demo user, redrawn by SandboxScript as the
// feed changes.
func Sandbox(w io.Writer, d SandboxData) error { return renderConsole(w, sandboxTmpl, d) }
