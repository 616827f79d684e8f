package simulator

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/campus-it/ucs/pkg/platform/keyword"
)

// The platform's codes and messages the simulator answers with, as its
// documentation and its answers in the field give them.
const (
	codeBusy              = -1    // system error
	codeDailyQuota        = 45009 // the account's daily quota is used up
	codeIPNotWhitelisted  = 40164 // the caller's address is not on the IP whitelist
	codeInvalidCredential = 40001 // token replaced by a forced refresh
	codeInvalidGrantType  = 40002
	codeInvalidOpenID     = 40003
	codeInvalidAppID      = 40013
	codeInvalidToken      = 40014
	codeInvalidTemplateID = 40037
	codeInvalidAppSecret  = 40125
	codeMissingToken      = 41001
	codeMissingAppID      = 41002
	codeMissingSecret     = 41004
	codeTokenExpired      = 42001
	codeRequireGET        = 43001
	codeRequirePOST       = 43002
	codeRequireSubscribe  = 43004
	codeUserRefused       = 43101
	codeEmptyPost         = 44002
	codeDataFormat        = 47001
	codeArgumentInvalid   = 47003
)

const maxRequestBytes = 1 << 20

// Handler serves the platform's API paths and the admin API under /sim/.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/cgi-bin/stable_token", s.handleStableToken)
	mux.HandleFunc("/cgi-bin/message/template/send", s.handleSend)
	s.accountRoutes(mux)
	s.webAuthRoutes(mux)
	s.adminRoutes(mux)
	return mux
}

// stableTokenRequest is the body of POST /cgi-bin/stable_token.
type stableTokenRequest struct {
	GrantType    string `json:"grant_type"`
	AppID        string `json:"appid"`
	Secret       string `json:"secret"`
	ForceRefresh bool   `json:"force_refresh"`
}

// checkAccount answers the platform's error for a missing or wrong appid or secret, in the
// platform's order, and reports whether they are the account's.
func (s *Simulator) checkAccount(w http.ResponseWriter, appID, secret string) bool {
	switch {
	case appID == "":
		s.answerError(w, codeMissingAppID, "appid missing")
	case appID != s.cfg.AppID:
		s.answerError(w, codeInvalidAppID, "invalid appid")
	case secret == "":
		s.answerError(w, codeMissingSecret, "appsecret missing")
	case subtle.ConstantTimeCompare([]byte(secret), []byte(s.cfg.Secret)) != 1:
		s.answerError(w, codeInvalidAppSecret, "invalid appsecret")
	default:
		return true
	}
	return false
}

func (s *Simulator) handleStableToken(w http.ResponseWriter, r *http.Request) {
	s.stats.tokenRequests.Add(1)
	if r.Method != http.MethodPost {
		s.answerError(w, codeRequirePOST, "require POST method")
		return
	}
	var req stableTokenRequest
	if code, msg := decodeBody(w, r, &req); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	switch {
	case req.GrantType != "client_credential":
		s.answerError(w, codeInvalidGrantType, "invalid grant_type")
		return
	case !s.checkAccount(w, req.AppID, req.Secret):
		return
	}
	if req.ForceRefresh {
		s.stats.tokenForceRefreshes.Add(1)
	}
	tok, left, ok := s.issueToken(req.ForceRefresh)
	if !ok {
		s.answerError(w, codeDailyQuota, "reach max api daily quota limit")
		return
	}
	expiresIn := max(int64(left/time.Second), 1)
	b := make([]byte, 0, 160)
	b = append(b, `{"access_token":"`...)
	b = append(b, tok...) // URL-safe base64: nothing to escape
	b = append(b, `","expires_in":`...)
	b = strconv.AppendInt(b, expiresIn, 10)
	b = append(b, '}')
	writeJSON(w, b)
}

// issueToken returns the token to hand out and its remaining life. Normal
// mode keeps the current token, except in its last minutes, when it makes a
// new one and lets the old one live out its time, so holders of the old
// token are never cut off. A forced refresh makes a new token and revokes
// every other one, at most once in 30 s (within them it is normal mode) and
// 20 times a day (beyond them ok is false: 45009).
func (s *Simulator) issueToken(force bool) (tok string, left time.Duration, ok bool) {
	now := s.now()
	renewBefore := min(maxRenewBefore, s.cfg.TokenTTL/24)
	s.mu.Lock()
	defer s.mu.Unlock()
	if force {
		i := 0
		for i < len(s.forced) && now.Sub(s.forced[i]) >= 24*time.Hour {
			i++
		}
		s.forced = s.forced[i:]
		switch n := len(s.forced); {
		case n >= forcedRefreshesPerDay:
			return "", 0, false
		case n > 0 && now.Sub(s.forced[n-1]) < forcedRefreshGap:
			force = false
		default:
			s.forced = append(s.forced, now)
		}
	}
	cur := s.tokens[s.current]
	if force || cur == nil || cur.revoked || cur.exp.Sub(now) <= renewBefore {
		for tok, st := range s.tokens {
			if force {
				st.revoked = true
			}
			if now.Sub(st.exp) > 24*time.Hour {
				delete(s.tokens, tok) // long dead: an unknown token (40014) now
			}
		}
		tok := newToken()
		cur = &tokenState{exp: now.Add(s.cfg.TokenTTL)}
		s.tokens[tok] = cur
		s.current = tok
	}
	return s.current, cur.exp.Sub(now), true
}

// checkToken returns the errcode for an access token, 0 if it is usable.
func (s *Simulator) checkToken(tok string, now time.Time) (int, string) {
	if tok == "" {
		return codeMissingToken, "access_token missing"
	}
	s.mu.Lock()
	st := s.tokens[tok]
	var revoked bool
	var exp time.Time
	if st != nil {
		revoked, exp = st.revoked, st.exp
	}
	s.mu.Unlock()
	switch {
	case st == nil:
		return codeInvalidToken, "invalid access_token"
	case revoked:
		return codeInvalidCredential, "invalid credential, access_token is invalid or not latest"
	case !now.Before(exp):
		return codeTokenExpired, "access_token expired"
	}
	return 0, ""
}

// keywordValue is one entry of "data". The platform documents the value as
// "any": a number is taken as its literal text.
type keywordValue struct {
	Value flexString `json:"value"`
}

type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(s)
	case bytes.Equal(b, []byte("null")):
		*f = ""
	default:
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return errors.New("value must be a string or a number")
		}
		*f = flexString(n)
	}
	return nil
}

// sendRequest is the body of POST /cgi-bin/message/template/send.
type sendRequest struct {
	ToUser      string                  `json:"touser"`
	TemplateID  string                  `json:"template_id"`
	URL         string                  `json:"url"`
	ClientMsgID string                  `json:"client_msg_id"`
	Data        map[string]keywordValue `json:"data"`
}

func (s *Simulator) handleSend(w http.ResponseWriter, r *http.Request) {
	s.stats.sends.Add(1)
	s.mu.Lock()
	f := s.faults
	serverError := f.ServerErrorRate > 0 && s.rng.Float64() < f.ServerErrorRate
	busy := f.BusyRate > 0 && s.rng.Float64() < f.BusyRate
	s.mu.Unlock()

	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if serverError {
		s.stats.serverErrors.Add(1)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>\n")
		return
	}
	if r.Method != http.MethodPost {
		s.answerError(w, codeRequirePOST, "require POST method")
		return
	}
	if busy {
		s.answerError(w, codeBusy, "system error")
		return
	}
	if f.AddressRefused {
		ip, _, _ := net.SplitHostPort(r.RemoteAddr)
		s.answerError(w, codeIPNotWhitelisted, "invalid ip "+ip+", not in whitelist")
		return
	}
	if f.QuotaUsedUp {
		s.answerError(w, codeDailyQuota, "reach max api daily quota limit")
		return
	}
	now := s.now()
	if code, msg := s.checkToken(r.URL.Query().Get("access_token"), now); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	var req sendRequest
	if code, msg := decodeBody(w, r, &req); code != 0 {
		s.answerError(w, code, msg)
		return
	}
	if req.ToUser == "" {
		s.answerError(w, codeInvalidOpenID, "invalid openid")
		return
	}
	key := s.dedupKeyOf(req.ToUser, req.ClientMsgID)

	s.mu.Lock()
	if id, ok := s.dedupLocked(key, now); ok {
		s.mu.Unlock()
		s.stats.deduplicated.Add(1)
		writeSendOK(w, id)
		return
	}
	fol := s.followers[req.ToUser]
	tpl := s.templates[req.TemplateID]
	var following, refusing bool
	if fol != nil {
		following, refusing = fol.following, fol.refusing
	}
	s.mu.Unlock()

	switch {
	case fol == nil:
		s.answerError(w, codeInvalidOpenID, "invalid openid")
		return
	case tpl == nil:
		s.answerError(w, codeInvalidTemplateID, "invalid template_id")
		return
	case !following:
		s.answerError(w, codeRequireSubscribe, "require subscribe")
		return
	case refusing:
		s.answerError(w, codeUserRefused, "user refuse to accept the msg")
		return
	}
	if msg := checkData(tpl, req.Data); msg != "" {
		s.answerError(w, codeArgumentInvalid, msg)
		return
	}
	if req.URL != "" && !isHTTPURL(req.URL) {
		s.answerError(w, codeArgumentInvalid, "argument invalid! url invalid")
		return
	}
	data := make(map[string]string, len(req.Data))
	for k, v := range req.Data {
		// An old industry template's first and remark are taken as sent (the platform no longer
		// shows them: the sandbox's phones leave them out), its keywords cut as it shows them.
		switch {
		case tpl.industry && k != "first" && k != "remark":
			data[k] = keyword.Strip(string(v.Value))
		default:
			data[k] = string(v.Value)
		}
	}

	s.mu.Lock()
	// A repeat may have been accepted while this one was being checked.
	if id, ok := s.dedupLocked(key, now); ok {
		s.mu.Unlock()
		s.stats.deduplicated.Add(1)
		writeSendOK(w, id)
		return
	}
	s.nextMsgID++
	id := s.nextMsgID
	status := StatusSuccess
	if f.BlockRate > 0 && s.rng.Float64() < f.BlockRate {
		status = StatusUserBlock
	} else if f.SystemFailRate > 0 && s.rng.Float64() < f.SystemFailRate {
		status = StatusSystemFailed
	}
	if len(s.sent) >= s.cfg.MaxSent {
		// Drop the oldest tenth at once, so trimming is rare rather than on every send.
		keep := s.sent[len(s.sent)-s.cfg.MaxSent*9/10:]
		s.sent = append(s.sent[:0:0], keep...)
	}
	s.sent = append(s.sent, SentMessage{
		MsgID: id, ToUser: req.ToUser, TemplateID: req.TemplateID, URL: req.URL,
		ClientMsgID: req.ClientMsgID, Data: data, At: now,
	})
	if req.ClientMsgID != "" {
		s.rememberLocked(key, id, now)
	}
	s.mu.Unlock()
	s.stats.accepted.Add(1)

	if s.pusher != nil {
		s.pusher.push(event{
			due:     time.Now().Add(s.cfg.CallbackDelay),
			openid:  req.ToUser,
			created: now.Unix(),
			name:    eventTemplateFinish,
			msgID:   id,
			status:  status,
		})
	}
	writeSendOK(w, id)
}

// dedupLocked looks up a send of the same openid and client_msg_id within the
// window.
//
// The platform documents only that for one openid and client_msg_id it
// "sends one message" within ten minutes; it does not say what a repeat is
// answered. The simulator answers errcode 0 with the msgid of the first send
// and delivers nothing more, so a sender that lost the first answer learns
// the id the final-status event will name. (The mass-send API, whose
// clientmsgid is documented in more detail, refuses a repeat with 45065 and
// the existing msg_id instead.)
func (s *Simulator) dedupLocked(key dedupKey, now time.Time) (int64, bool) {
	if key == 0 {
		return 0, false
	}
	e, ok := s.dedup[key]
	if !ok || now.UnixNano()-e.at >= int64(dedupWindow) {
		return 0, false
	}
	return e.msgID, true
}

// rememberLocked records a send for de-duplication and forgets those past
// the window, oldest first, so the map stays as small as the window allows.
func (s *Simulator) rememberLocked(key dedupKey, id int64, now time.Time) {
	s.dedup[key] = dedupEntry{msgID: id, at: now.UnixNano()}
	s.dedupFIFO = append(s.dedupFIFO, key)
	for s.dedupHead < len(s.dedupFIFO) {
		k := s.dedupFIFO[s.dedupHead]
		if e, ok := s.dedup[k]; ok {
			if now.UnixNano()-e.at < int64(dedupWindow) {
				break
			}
			delete(s.dedup, k)
		}
		s.dedupFIFO[s.dedupHead] = 0
		s.dedupHead++
	}
	if s.dedupHead > 1024 && s.dedupHead*2 > len(s.dedupFIFO) {
		n := copy(s.dedupFIFO, s.dedupFIFO[s.dedupHead:])
		s.dedupFIFO, s.dedupHead = s.dedupFIFO[:n], 0
	}
}

// checkData returns the 47003 message for the first (by name) keyword that
// the template lacks or whose value breaks its kind's rule; "" if all obey.
func checkData(t *template, data map[string]keywordValue) string {
	if len(data) == 0 {
		return "argument invalid! data is empty"
	}
	bad, missing := "", false
	for k, v := range data {
		if t.industry && (k == "first" || k == "remark") {
			continue
		}
		kind, ok := t.kinds[k]
		if ok && keyword.Valid(kind, string(v.Value)) {
			continue
		}
		if bad == "" || k < bad {
			bad, missing = k, !ok
		}
	}
	switch {
	case bad == "":
		return ""
	case missing:
		return "argument invalid! data." + bad + " not exist"
	default:
		return "argument invalid! data." + bad + ".value invalid"
	}
}

func isHTTPURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// decodeBody reads a JSON body into v, bounded; it returns the platform's
// code and message for an empty or malformed body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) (int, string) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		return codeDataFormat, "data format error"
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return codeEmptyPost, "empty post data"
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return codeDataFormat, "data format error"
	}
	return 0, ""
}

// answerError writes an errcode answer; as the platform does, the message
// ends with a request id.
func (s *Simulator) answerError(w http.ResponseWriter, code int, msg string) {
	s.mu.Lock()
	s.errors[code]++
	s.mu.Unlock()
	b, _ := json.Marshal(struct {
		ErrCode int    `json:"errcode"`
		ErrMsg  string `json:"errmsg"`
	}{code, msg + " rid: " + s.requestID()})
	writeJSON(w, b)
}

func writeSendOK(w http.ResponseWriter, id int64) {
	b := make([]byte, 0, 64)
	b = append(b, `{"errcode":0,"errmsg":"ok","msgid":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '}')
	writeJSON(w, b)
}

// writeJSON answers 200 with a JSON body: the platform reports errors in the
// body, not in the HTTP status.
func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json; encoding=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
