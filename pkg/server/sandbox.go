package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// The sandbox phones (GET /sandbox) exist only in the standalone stack, whose platform is the
// simulator: a developer sees each demo user's phone with the template messages the simulator
// received, drawn after the platform's rules, and each message's delivery state, as they
// arrive. The page's script polls GET /sandbox/feed, the same data as JSON.

// Sandbox configures the sandbox phones.
type Sandbox struct {
	// Received returns up to n of the latest template messages the simulated platform
	// accepted for openID, newest first.
	Received func(openID string, n int) []SandboxMessage
	// Phones are the demo users whose phones are shown, in order.
	Phones []SandboxPhone
	// Templates are the platform templates by template id: the push type each carries and
	// the data field each keyword holds.
	Templates map[string]SandboxTemplate
}

// SandboxMessage is a template message the simulated platform accepted.
type SandboxMessage struct {
	// UcsID is the message's client_msg_id, which the workers set to the ucsId.
	UcsID, TemplateID, URL string
	// Data holds the keywords' values.
	Data map[string]string
	At   time.Time
}

// SandboxPhone is a demo user and the follower id their messages go to.
type SandboxPhone struct {
	UserID, OpenID string
}

// SandboxTemplate is a platform template: the push type it carries, and for each keyword the
// data field of the push it holds.
type SandboxTemplate struct {
	Type   string
	Fields map[string]string
}

// sandboxMessages is how many messages a phone shows, the latest.
const sandboxMessages = 20

func (s *Server) sandboxRoutes() {
	if s.cfg.Sandbox == nil {
		return // not standalone: 404
	}
	s.e.GET("/sandbox", s.sandbox)
	s.e.GET("/sandbox/feed", s.sandboxFeed)
	s.e.GET("/sandbox/sandbox.js", func(c echo.Context) error {
		c.Response().Header().Set("X-Content-Type-Options", "nosniff")
		c.Response().Header().Set("Cache-Control", "no-cache")
		return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", pages.SandboxScript)
	})
}

func (s *Server) sandbox(c echo.Context) error {
	d := s.sandboxData(c.Request().Context())
	d.Feed, d.Script = "/sandbox/feed", "/sandbox/sandbox.js"
	nonce := pages.NewNonce()
	d.Nonce = nonce
	var buf bytes.Buffer
	if err := pages.Sandbox(&buf, d); err != nil {
		return &Error{Code: CodeInternal, Message: "internal error", Internal: err}
	}
	pages.LiveHeaders(c.Response().Header(), nonce)
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}

// sandboxFeed answers the phones as JSON, or 304 when nothing changed since the version the
// browser holds.
func (s *Server) sandboxFeed(c echo.Context) error {
	d := s.sandboxData(c.Request().Context())
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	etag := `"` + d.Version + `"`
	h.Set("ETag", etag)
	if c.Request().Header.Get("If-None-Match") == etag {
		return c.NoContent(http.StatusNotModified)
	}
	return c.JSON(http.StatusOK, d)
}

// sandboxData draws every phone. A message's state is read from memory when its final result
// was announced, else from the store by its ucsId; a phone shows at most sandboxMessages, so a
// poll reads the store only for the few messages still awaiting their receipt.
func (s *Server) sandboxData(ctx context.Context) pages.SandboxData {
	sb := s.cfg.Sandbox
	var d pages.SandboxData
	for _, p := range sb.Phones {
		phone := pages.Phone{UserID: p.UserID, OpenID: p.OpenID, Messages: []pages.PhoneMessage{}}
		for _, m := range sb.Received(p.OpenID, sandboxMessages) {
			pm := phoneMessage(m, sb.Templates)
			pm.State, pm.StateText = s.sandboxState(ctx, m.UcsID)
			phone.Messages = append(phone.Messages, pm)
		}
		d.Phones = append(d.Phones, phone)
	}
	b, _ := json.Marshal(d.Phones)
	sum := fnv.New64a()
	_, _ = sum.Write(b)
	d.Version = strconv.FormatUint(sum.Sum64(), 36)
	return d
}

// stateTexts are the delivery states as the phones name them.
var stateTexts = map[push.State]string{
	push.StateSent:      "已发送，等待回执 Sent, awaiting the receipt",
	push.StateDelivered: "已送达 Delivered",
	push.StateFailed:    "未送达 Not delivered",
}

// sandboxState is the delivery state of a message the platform accepted (so it is sent at
// least) and its description.
func (s *Server) sandboxState(ctx context.Context, ucsID string) (string, string) {
	r, ok := s.notify.Remembered(ucsID)
	if !ok && push.ValidID(ucsID) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreWait)
		defer cancel()
		if cur, err := s.cfg.Store.Current(ctx, ucsID); err == nil {
			r, ok = cur, true
			s.notify.Remember(cur) // a final result missed on NATS is read once
		} else if !errors.Is(err, store.ErrNotFound) {
			s.log.Debug("sandbox: state not read", "ucsId", ucsID, "err", err)
		}
	}
	st := push.StateSent
	if ok && r.State.Final() {
		st = r.State
	}
	text := stateTexts[st]
	if st == push.StateFailed && r.Reason != "" {
		text += ": " + r.Reason
	}
	return string(st), text
}

// dropped are the keywords the platform no longer shows: the first line and the remark of
// templates made before its rules of May 2023.
var dropped = map[string]bool{"first": true, "remark": true}

// phoneMessage draws a message as the phone shows it under the platform's rules: the title of
// its template, then each main item in the type's order with its label. The first line and the
// remark are not shown, emoji are removed outright, and colours do not exist (every value is
// drawn alike).
func phoneMessage(m SandboxMessage, templates map[string]SandboxTemplate) pages.PhoneMessage {
	pm := pages.PhoneMessage{UcsID: m.UcsID, Title: m.TemplateID, At: m.At.In(sandboxZone).Format("01-02 15:04:05"), Link: m.URL != ""}
	tpl, known := templates[m.TemplateID]
	spec, typed := push.LookupType(tpl.Type)
	if known && typed {
		pm.Title = spec.MeaningZH
	}
	shown := map[string]bool{}
	if typed {
		for _, f := range spec.Fields {
			if !f.Main {
				continue // header and remark: the first line and the remark
			}
			for kw, field := range tpl.Fields {
				if field != f.Name || dropped[kw] {
					continue
				}
				if v, ok := m.Data[kw]; ok {
					pm.Items = append(pm.Items, pages.PhoneItem{Label: f.DescZH, Value: push.RemoveEmoji(v)})
				}
				shown[kw] = true
			}
		}
	}
	// Keywords the configuration does not map are still shown, by name, as a phone would show
	// a template's other items; mapped header and remark fields are not.
	var rest []string
	for kw := range m.Data {
		if f := tpl.Fields[kw]; !shown[kw] && !dropped[kw] && f != "header" && f != "remark" {
			rest = append(rest, kw)
		}
	}
	slices.Sort(rest)
	for _, kw := range rest {
		pm.Items = append(pm.Items, pages.PhoneItem{Label: kw, Value: push.RemoveEmoji(m.Data[kw])})
	}
	return pm
}

// sandboxZone is the campus's time zone, in which the phones show times.
var sandboxZone = time.FixedZone("CST", 8*60*60)
