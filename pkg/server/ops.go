package server

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/activity"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/pages"
	"github.com/campus-it/ucs/pkg/push"
	"github.com/campus-it/ucs/pkg/queue"
	"github.com/campus-it/ucs/pkg/store"
)

// The operations page (GET /ops) shows operators what the service is doing: counts by state,
// the last hour per minute, the consumer's backlog, failures by reason with the latest ones
// linked to their history, and the pause of sending. Everything on it comes from memory and
// the queue (package activity, the consumer's info, the pause bucket): nothing scans the store,
// which on the embedded FerretDB would read whole tables. A push's history costs three reads
// by _id.
//
// It belongs to the service's own sign-in session: operators sign in as everyone does, and
// only the user numbers of ops.users are let in. The session cookie lives under the realm's
// path, so a sign-in for this page ends at {realm}/ops-signin, which gives the same session
// to the /ops path in a cookie of its own.

// Ops configures the operations page.
type Ops struct {
	// Users are the user numbers let in; anyone else signed in gets 403. Empty: the page is off.
	Users []string
	// Activity is what this front end has seen: the notification service counts accepts,
	// sends and final results into it (notification.Config).
	Activity *activity.Recorder
	// Backlog reads the messages the consumer has not finished; nil shows none.
	Backlog func() (float64, error)
	// History reads every record the store keeps of a push; *store.Store.History.
	History func(ctx context.Context, ucsID string) ([]store.Record, error)
}

const (
	opsPath = "/ops"
	// cookieOps carries the sign-in session to the /ops path; the same session as
	// cookieSession, which the browser sends only under the realm's path.
	cookieOps = "UCS_OPS"
)

func (s *Server) opsRoutes() {
	if s.cfg.Ops == nil || len(s.cfg.Ops.Users) == 0 || s.cfg.SignIn == nil {
		return // the page is off: 404
	}
	s.e.GET(opsPath, s.ops, browserPage)
	s.e.GET(opsPath+"/history/:ucsId", s.opsHistory, browserPage)
	s.e.GET(s.realmPath()+"/ops-signin", s.opsSignIn, browserPage)
}

// opsTarget is the page of the operations console a sign-in returns to: only its own pages,
// so the parameter cannot send a browser elsewhere.
func opsTarget(to string) string {
	if id, ok := strings.CutPrefix(to, opsPath+"/history/"); ok && push.ValidID(strings.ToUpper(id)) {
		return to
	}
	return opsPath
}

// opsUser checks the request's sign-in and that the user is an operator. ok false: the answer
// is written (sent to sign in, or 403) and the handler returns err at once.
func (s *Server) opsUser(c echo.Context) (userID string, ok bool, err error) {
	cookie := cookieValue(c, cookieOps)
	var se store.Session
	if cookie != "" {
		se, err = s.cfg.SignIn.Store.Session(c.Request().Context(), oauth.Hash(cookie))
	}
	if cookie == "" || err != nil {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return "", false, &Error{Code: CodeUnavailable, Message: "the sign-in could not be checked; try again", Internal: err}
		}
		to := url.Values{"to": {c.Request().URL.Path}}
		return "", false, c.Redirect(http.StatusSeeOther, s.realmPath()+"/ops-signin?"+to.Encode())
	}
	if !slices.Contains(s.cfg.Ops.Users, se.UserID) {
		s.log.Warn("operations page refused: not an operator", "user", se.UserID, "addr", c.RealIP())
		return "", false, s.errorPage(c, http.StatusForbidden, "没有权限 Forbidden",
			"您的账号无权打开运维页面，请申请将您的学工号加入 ops.users。 Your account may not open the operations page. Ask for your user number to be added to ops.users.", "forbidden")
	}
	return se.UserID, true, nil
}

// opsSignIn hands the browser's sign-in session to the /ops path, or signs the browser in
// first; then it returns to the page that asked.
func (s *Server) opsSignIn(c echo.Context) error {
	to := opsTarget(c.QueryParam("to"))
	se, cookie, ok, err := s.accountSession(c)
	if err != nil {
		return err
	}
	if ok {
		c.SetCookie(&http.Cookie{
			Name: cookieOps, Value: cookie, Path: opsPath, HttpOnly: true, SameSite: http.SameSiteLaxMode,
			Secure: s.secureCookies(), MaxAge: max(1, int(se.Expires.Sub(s.now())/time.Second)),
		})
		return c.Redirect(http.StatusSeeOther, to)
	}
	return s.startSignIn(c, "kc_idp_hint", store.AuthRequest{Account: true, Return: s.realmPath() + "/ops-signin?" + url.Values{"to": {to}}.Encode()})
}

// ops shows the operations page.
func (s *Server) ops(c echo.Context) error {
	user, ok, err := s.opsUser(c)
	if !ok {
		return err
	}
	snap := s.activity.Snapshot()
	d := pages.OpsData{
		UserID: user, SignOut: s.realmPath() + "/protocol/openid-connect/logout", Since: s.local(snap.Since), Now: s.local(s.now()),
		HistoryBase: opsPath + "/history/",
	}
	backlog := pages.OpsCount{State: "queued", ZH: "排队和发送中", EN: "in the queue or being sent", Unknown: true}
	if f := s.cfg.Ops.Backlog; f != nil {
		if n, err := f(); err == nil {
			backlog.N, backlog.Unknown = int64(n), false
		} else {
			s.log.Warn("operations page: the consumer's backlog could not be read", "err", err)
		}
	}
	d.Counts = []pages.OpsCount{
		{State: "accepted", ZH: "已受理", EN: "accepted here", N: snap.Accepted},
		backlog,
		{State: "sent", ZH: "已发送待回执", EN: "sent, awaiting receipt", N: snap.AwaitingReceipt},
		{State: "delivered", ZH: "已送达", EN: "delivered", N: snap.Delivered},
		{State: "failed", ZH: "失败", EN: "failed", N: snap.Failed},
	}
	if s.cfg.Paused != nil {
		if st, paused := s.cfg.Paused(); paused {
			d.Paused, d.PausedUntil, d.PauseReason, d.PauseAction = true, s.local(st.Until), st.Reason, st.Action
		}
	}
	d.Charts = opsCharts(snap, s.loc)
	for _, k := range snap.Kinds {
		d.Kinds = append(d.Kinds, pages.OpsKind{Kind: k.Kind, Count: k.Count})
	}
	for _, f := range snap.Recent {
		d.Failures = append(d.Failures, pages.OpsFailure{UcsID: f.UcsID, UserID: f.UserID, Type: f.Type, Reason: f.Reason, At: s.local(f.At)})
	}
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		d.Nonce = nonce
		return pages.Ops(b, d)
	})
}

// opsCharts draws the last hour: pushes per minute, and the latency of those delivered, its
// minutes labelled in loc.
func opsCharts(snap activity.Snapshot, loc *time.Location) []pages.Chart {
	n := len(snap.Minutes)
	at := make([]time.Time, n)
	acc, del, fail, p50, p95 := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	var sumAcc, sumDel, sumFail int64
	lastP50, lastP95 := "—", "—"
	for i, m := range snap.Minutes {
		at[i] = m.Start.In(loc)
		acc[i], del[i], fail[i] = float64(m.Accepted), float64(m.Delivered), float64(m.Failed)
		sumAcc, sumDel, sumFail = sumAcc+m.Accepted, sumDel+m.Delivered, sumFail+m.Failed
		p50[i], p95[i] = math.NaN(), math.NaN()
		if m.Delivered > 0 && m.P95 > 0 {
			p50[i], p95[i] = m.P50.Seconds(), m.P95.Seconds()
			lastP50, lastP95 = pages.FormatSeconds(p50[i]), pages.FormatSeconds(p95[i])
		}
	}
	total := func(v int64) string { return "· " + strconv.FormatInt(v, 10) }
	return []pages.Chart{
		pages.NewChart("throughput", "每分钟消息数", "Pushes per minute", at, pages.CountAxis,
			pages.Series{Name: "accepted", Label: "受理 accepted", Summary: total(sumAcc), Values: acc},
			pages.Series{Name: "delivered", Label: "送达 delivered", Summary: total(sumDel), Values: del},
			pages.Series{Name: "failed", Label: "失败 failed", Summary: total(sumFail), Values: fail}),
		pages.NewChart("latency", "端到端延迟（受理到送达）", "End-to-end latency, accepted to delivered", at, pages.SecondsAxis,
			pages.Series{Name: "p50", Label: "中位数 p50", Summary: "· " + lastP50, Values: p50},
			pages.Series{Name: "p95", Label: "p95", Summary: "· " + lastP95, Values: p95}),
	}
}

// recordNames are the records of a push in words.
var recordNames = map[string]string{
	store.RecordFinal: "最终结果", store.RecordSent: "已发送", store.RecordProgress: "投递进度", "memory": "内存中的最终结果",
}

// opsHistory shows every record of one push: what the store holds, and where the queue has it.
func (s *Server) opsHistory(c echo.Context) error {
	if _, ok, err := s.opsUser(c); !ok {
		return err
	}
	id := strings.ToUpper(c.Param("ucsId")) // a ULID, read in either case
	if !push.ValidID(id) {
		return s.errorPage(c, http.StatusNotFound, "未找到 Not found", "这不是一个 ucsId。 This is not a ucsId.", "not_found")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	var recs []store.Record
	if s.cfg.Ops.History != nil {
		var err error
		if recs, err = s.cfg.Ops.History(ctx, id); err != nil {
			return &Error{Code: CodeUnavailable, Message: "the store did not answer; try again", Internal: err}
		}
	}
	if r, ok := s.notify.Remembered(id); ok && !slices.ContainsFunc(recs, func(x store.Record) bool { return x.Kind == store.RecordFinal }) {
		// Announced but not (yet) readable from the store: a store outage, or a slow replica.
		recs = append([]store.Record{{Kind: "memory", Result: r}}, recs...)
	}
	d := pages.HistoryData{UcsID: id, Back: opsPath}
	switch _, err := s.cfg.Waiting.Find(ctx, id); {
	case err == nil:
		d.Queue = "在队列中，等待投递或重试。 In the queue, waiting for a worker or a retry."
	case !errors.Is(err, queue.ErrNotWaiting):
		d.Queue = "队列未回答。 The queue did not answer."
	}
	for _, r := range recs {
		res := r.Result
		hr := pages.HistoryRecord{Kind: r.Kind, KindZH: recordNames[r.Kind], Result: pages.HistoryResult{
			State: string(res.State), UserID: res.UserID, Type: res.Type, ClientID: res.ClientID, Attempts: res.Attempts,
			Reason: res.Reason, LastError: res.LastError, Accepted: s.local(res.Accepted), Sent: s.local(res.Sent),
			Finished: s.local(res.Finished), RetryAt: s.local(res.RetryAt), Updated: s.local(res.Updated),
		}}
		if res.MsgID != 0 {
			hr.Result.MsgID = strconv.FormatInt(res.MsgID, 10)
		}
		d.Records = append(d.Records, hr)
	}
	return s.page(c, http.StatusOK, func(b *bytes.Buffer, nonce string) error {
		d.Nonce = nonce
		return pages.History(b, d)
	})
}
