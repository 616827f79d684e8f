package standalone

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

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/pkg/platform/simulator"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/store"
)

// The sandbox phones (GET /sandbox) exist only in the standalone stack, whose platform is the
// simulator: a developer sees each demo user's phone with the template messages the simulator
// received, drawn after the platform's rules, and each message's delivery state, as they
// arrive. The page's script polls GET /sandbox/feed, the same data as JSON.

// sandboxTemplate is a platform template: the push type it carries, and for each keyword the
// data field of the push it holds.
type sandboxTemplate struct {
	Type   string
	Fields map[string]string
}

// sandboxPhone is a demo user and the follower id their messages go to.
type sandboxPhone struct{ UserID, OpenID string }

// sandbox draws the demo users' phones from what the simulator received.
type sandbox struct {
	s         *Stack
	phones    []sandboxPhone
	templates map[string]sandboxTemplate
}

// sandboxMessages is how many messages a phone shows, the latest.
const sandboxMessages = 20

// sandboxStoreWait bounds a read of a message's state from the store.
const sandboxStoreWait = 300 * time.Millisecond

// sandboxRoutes returns what adds the sandbox phones of the demo users to the front end.
func (s *Stack) sandboxRoutes(cfg *config.Config, seed *seedState) func(e *echo.Echo) {
	sb := &sandbox{s: s, templates: map[string]sandboxTemplate{}}
	for typ, tpl := range cfg.Platform.Templates {
		fields := map[string]string{}
		for field, kw := range tpl.Fields {
			fields[kw] = field
		}
		sb.templates[tpl.TemplateID] = sandboxTemplate{Type: typ, Fields: fields}
	}
	// The seeded followers' phones (the file's binding of a demo user wins), at every start.
	for _, b := range seed.info.Bindings {
		if i := slices.IndexFunc(cfg.Bindings, func(x config.Binding) bool { return x.UserID == b.UserID }); i >= 0 {
			b = cfg.Bindings[i]
		}
		sb.phones = append(sb.phones, sandboxPhone{UserID: b.UserID, OpenID: b.OpenID})
	}
	return func(e *echo.Echo) {
		e.GET("/sandbox", sb.page)
		e.GET("/sandbox/feed", sb.feed)
		e.GET("/sandbox/sandbox.js", func(c echo.Context) error {
			c.Response().Header().Set("X-Content-Type-Options", "nosniff")
			c.Response().Header().Set("Cache-Control", "no-cache")
			return c.Blob(http.StatusOK, "text/javascript; charset=utf-8", pages.SandboxScript)
		})
	}
}

func (sb *sandbox) page(c echo.Context) error {
	d := sb.data(c.Request().Context())
	d.Feed, d.Script = "/sandbox/feed", "/sandbox/sandbox.js"
	nonce := pages.NewNonce()
	d.Nonce = nonce
	var buf bytes.Buffer
	if err := pages.Sandbox(&buf, d); err != nil {
		return err
	}
	pages.LiveHeaders(c.Response().Header(), nonce)
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}

// feed answers the phones as JSON, or 304 when nothing changed since the version the browser
// holds.
func (sb *sandbox) feed(c echo.Context) error {
	d := sb.data(c.Request().Context())
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	etag := `"` + d.Version + `"`
	h.Set("ETag", etag)
	if c.Request().Header.Get("If-None-Match") == etag {
		return c.NoContent(http.StatusNotModified)
	}
	return c.JSON(http.StatusOK, d)
}

// data draws every phone. A message's state is read from memory when its final result was
// announced, else from the store by its ucsId; a phone shows at most sandboxMessages, so a
// poll reads the store only for the few messages still awaiting their receipt.
func (sb *sandbox) data(ctx context.Context) pages.SandboxData {
	var d pages.SandboxData
	for _, p := range sb.phones {
		phone := pages.Phone{UserID: p.UserID, OpenID: p.OpenID, Messages: []pages.PhoneMessage{}}
		for _, m := range sb.s.Sim.Recent(p.OpenID, sandboxMessages) {
			pm := phoneMessage(m, sb.templates)
			pm.State, pm.StateText = sb.state(ctx, m.ClientMsgID)
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

// state is the delivery state of a message the platform accepted (so it is sent at least) and
// its description.
func (sb *sandbox) state(ctx context.Context, ucsID string) (string, string) {
	api := sb.s.API
	r, ok := api.Notify.Remembered(ucsID)
	if !ok && push.ValidID(ucsID) {
		ctx, cancel := context.WithTimeout(ctx, sandboxStoreWait)
		defer cancel()
		if cur, err := api.Store.Current(ctx, ucsID); err == nil {
			r, ok = cur, true
			api.Notify.Remember(cur) // a final result missed on NATS is read once
		} else if !errors.Is(err, store.ErrNotFound) {
			sb.s.log.Debug("sandbox: state not read", "ucsId", ucsID, "err", err)
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

// stateTexts are the delivery states as the phones name them.
var stateTexts = map[push.State]string{
	push.StateSent:      "已发送，等待回执 Sent, awaiting the receipt",
	push.StateDelivered: "已送达 Delivered",
	push.StateFailed:    "未送达 Not delivered",
}

// dropped are the keywords the platform no longer shows: the first line and the remark of
// templates made before its rules of May 2023.
var dropped = map[string]bool{"first": true, "remark": true}

// phoneMessage draws a message as the phone shows it under the platform's rules: the title of
// its template, then each main item in the type's order with its label. The first line and the
// remark are not shown, emoji are removed outright, and colours do not exist (every value is
// drawn alike).
func phoneMessage(m simulator.SentMessage, templates map[string]sandboxTemplate) pages.PhoneMessage {
	pm := pages.PhoneMessage{UcsID: m.ClientMsgID, Title: m.TemplateID, At: m.At.In(sandboxZone).Format("01-02 15:04:05"), Link: m.URL != ""}
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
