package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"
	"golang.org/x/sync/semaphore"

	"github.com/campus-it/ucs/pkg/notification"
	"github.com/campus-it/ucs/pkg/push"
)

// MaxBatch is the most items a batch push or a batch lookup may hold.
const MaxBatch = 1000

// maxBatchBytes bounds a batch body: a thousand pushes of the largest kind seen in practice
// (about 1 KB each), with room to spare; every item is still held to a single push's limit.
const maxBatchBytes = 8 << 20

// queueUnavailableItem is the error of a batch item that got no PubAck: it was not accepted,
// and sending it again is safe.
const queueUnavailableItem = "queue unavailable; retry this item"

// uncheckedItem is the error of a batch item of a keyed retry that could not be checked
// (notification.ErrKeyUnchecked): not accepted, to be sent again with the batch's key.
const uncheckedItem = "not accepted: the earlier request under this Idempotency-Key cannot be checked now; send the batch again later with the same key"

// unconfirmedItem is the error of a batch item of a batch the queue did not confirm storing:
// it may be stored under its ucsId.
const unconfirmedItem = "unconfirmed: the queue did not confirm storing this item, which may be stored under its ucsId; look it up before sending it again"

type batchItem struct {
	Index  int      `json:"index"`
	UcsID  string   `json:"ucsId,omitempty"`
	Errors []string `json:"errors,omitempty"`
}

type batchAnswer struct {
	Accepted int         `json:"accepted"`
	Rejected int         `json:"rejected"`
	Results  []batchItem `json:"results"`
}

// readJSON reads a JSON body of at most limit bytes for a data interface.
func readJSON(c echo.Context, limit int) ([]byte, error) {
	if err := checkJSON(c.Request(), limit); err != nil {
		return nil, err
	}
	return readJSONBody(c.Request(), limit, 4<<10)
}

// checkJSON refuses a body the data interfaces cannot read (checkJSONRequest), or one declared
// longer than limit, before it is read.
func checkJSON(r *http.Request, limit int) *Error {
	if err := checkJSONRequest(r); err != nil {
		return err
	}
	if r.ContentLength > int64(limit) {
		return tooLarge(limit)
	}
	return nil
}

// readJSONBody reads a body of at most limit bytes that checkJSON let through, into a buffer of
// its declared length (+1, for the read that sees the end) up to first bytes, grown as more
// comes: a body declared long and sent slowly holds no more than has come.
func readJSONBody(r *http.Request, limit, first int) ([]byte, error) {
	size := first
	if r.ContentLength >= 0 {
		size = min(int(r.ContentLength)+1, first)
	}
	body, err := readBody(r.Body, make([]byte, 0, size), limit)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, tooLarge(limit)
		}
		return nil, errf(CodeBadRequest, "body: could not be read")
	}
	return body, nil
}

func tooLarge(limit int) *Error {
	return errf(CodeTooLarge, "body: larger than "+strconv.Itoa(limit)+" bytes")
}

// BatchRoom bounds the batch bodies a front end reads and holds at once, across requests, in
// bytes. A batch holds about two and a half times its body's size until it is answered, so
// that 64 MiB of bodies fit the 512 MiB the shipped manifests give a front end, however many
// batches come at once (32 batches of 8 MiB at once grew the heap by 412 MB without the bound,
// and by 167 MB with it). One client's batches hold at most a quarter of it.
const BatchRoom = 64 << 20

// answerTime is the time a push or a batch has to be stored and answered once its body is
// read: the queue's wait for a PubAck and a batch's answer, with room to spare.
const answerTime = 30 * time.Second

// answerInTime gives the answer its own time from now (answerTime): a body that came slowly (a
// large batch over a slow link) must not leave the server's write time-out, counted from the
// request's headers, spent by the time its pushes are stored, or the caller, told nothing,
// sends them again.
func answerInTime(c echo.Context) {
	_ = http.NewResponseController(c.Response().Writer).SetWriteDeadline(time.Now().Add(answerTime))
}

// batchRoomWait bounds a batch's wait for room: past it the batch is answered 503, to be sent
// again shortly.
const batchRoomWait = 5 * time.Second

// readBatch reads a batch body: application/json, at most maxBatchBytes, read only once it has
// room among the bodies held at once (BatchRoom). Its room is its declared Content-Length, or
// the largest batch's for a body of unknown length (chunked), taken whole, at once, first in
// its client's quarter of the room, then in the room: a batch that waits holds nothing, so
// that batches cannot hold the room between them, and one client's batches, however slowly
// their bodies come, leave three quarters of it to the others. A batch that finds no room
// within batchRoomWait is 503, having accepted nothing. release gives the room back once the
// batch is answered.
func (s *Server) readBatch(c echo.Context, client string) (body []byte, release func(), err error) {
	r := c.Request()
	if err := checkJSON(r, maxBatchBytes); err != nil {
		return nil, nil, err
	}
	n := int64(maxBatchBytes)
	if r.ContentLength >= 0 {
		n = r.ContentLength
	}
	shareSize := s.batchRoomSize / 4
	v, _ := s.clientRooms.LoadOrStore(client, semaphore.NewWeighted(shareSize))
	share := v.(*semaphore.Weighted)
	inShare, inRoom := min(n, shareSize), min(n, s.batchRoomSize)
	ctx, cancel := context.WithTimeout(r.Context(), s.batchRoomWait)
	defer cancel()
	busy := &Error{Code: CodeUnavailable, Header: http.Header{"Retry-After": {"5"}},
		Message: "too many batches are being read at once; send the batch again shortly"}
	if share.Acquire(ctx, inShare) != nil {
		return nil, nil, busy
	}
	if s.batchRoom.Acquire(ctx, inRoom) != nil {
		share.Release(inShare)
		return nil, nil, busy
	}
	release = func() {
		s.batchRoom.Release(inRoom)
		share.Release(inShare)
	}
	// Its room is taken: the body is read into one buffer of its declared length.
	if body, err = readJSONBody(r, maxBatchBytes, maxBatchBytes+1); err != nil {
		release()
		return nil, nil, err
	}
	return body, release, nil
}

// checkJSONRequest refuses, with 415, a body the data interfaces cannot read as sent: one with
// a Content-Encoding (the service decodes none, and would otherwise parse compressed bytes), or
// one that is not application/json.
func checkJSONRequest(r *http.Request) *Error {
	if !identityEncoding(r.Header) {
		return errEncoded()
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return errf(CodeMediaType, "Content-Type must be application/json")
	}
	return nil
}

// identityBody refuses, with 415, a request whose body comes with a Content-Encoding: the
// service decodes none, and the forms and the platform's callback would otherwise read
// compressed bytes as text. (The JSON interfaces check it with their Content-Type, and the
// token endpoints answer it in OAuth's shape.)
func identityBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !identityEncoding(c.Request().Header) {
			return errEncoded()
		}
		return next(c)
	}
}

// errEncoded is the answer to a body with a Content-Encoding: 415, naming the one coding taken
// (RFC 9110 §15.5.16).
func errEncoded() *Error {
	return &Error{Code: CodeMediaType, Message: "Content-Encoding is not supported: send the body uncompressed",
		Header: http.Header{"Accept-Encoding": {"identity"}}}
}

// identityEncoding reports whether h gives the body as sent: no Content-Encoding, or only
// identity (RFC 9110 §8.4).
func identityEncoding(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "identity") {
				return false
			}
		}
	}
	return true
}

// listItem is what a batch body's list holds: raw push bodies, or ucsIds.
type listItem interface{ jsontext.Value | string }

// decodeList reads a body that must be exactly {"<key>": [ … ]} with 1 to MaxBatch items. The
// body is JSON text as a single push reads it (UTF-8, no lone surrogate escape, key given
// once), checked as it is read; a raw item is checked by the push rules later, duplicate keys
// inside it included, and a string item must be a JSON string (null reads as "").
func decodeList[T listItem](body []byte, key string) ([]T, *Error) {
	// notJSON explains a body the decoder stopped at: what is wrong with its text.
	notJSON := func() *Error {
		p := push.TextProblem(body)
		if p == "" {
			p = "not valid JSON"
		}
		return errf(CodeBadRequest, "body: "+p)
	}
	shape := errf(CodeBadRequest, fmt.Sprintf("body: must be {%q: [ … ]} and nothing else", key))
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	switch dec.PeekKind() {
	case '{':
	case 0, ']', '}':
		return nil, notJSON()
	default:
		if _, err := dec.ReadValue(); err != nil {
			return nil, notJSON()
		}
		if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
			return nil, notJSON()
		}
		return nil, errf(CodeBadRequest, "body: not a JSON object")
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, notJSON()
	}
	var (
		list         []T
		items        int
		members      int
		found, array bool
		itemsErr     *Error
	)
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, notJSON()
		}
		name := tok.String() // the token is void after the next call
		members++
		if name != key || found || dec.PeekKind() != '[' {
			found = found || name == key
			if err := dec.SkipValue(); err != nil {
				return nil, notJSON()
			}
			continue
		}
		found, array = true, true
		if list, items, itemsErr, err = readItems[T](dec, key); err != nil {
			return nil, notJSON()
		}
	}
	// The closing brace, then nothing but white space.
	if _, err := dec.ReadToken(); err != nil {
		return nil, notJSON()
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, notJSON()
	}
	switch {
	case members != 1 || !found:
		return nil, shape
	case !array:
		return nil, errf(CodeBadRequest, key+": must be an array")
	case itemsErr != nil:
		return nil, itemsErr
	case items == 0 || items > MaxBatch:
		return nil, errf(CodeBadRequest, fmt.Sprintf("%s: %d items, must be 1 to %d", key, items, MaxBatch))
	}
	return list, nil
}

// readItems reads the array dec is at: its items (the first MaxBatch: past those the list is
// refused, and only counted), how many there are, or what is wrong with them as items; err
// when the text is not valid JSON.
func readItems[T listItem](dec *jsontext.Decoder, key string) (list []T, n int, bad *Error, err error) {
	if _, err := dec.ReadToken(); err != nil {
		return nil, 0, nil, err
	}
	list = []T{}
	for dec.PeekKind() != ']' {
		v, err := dec.ReadValue()
		if err != nil {
			return nil, 0, nil, err
		}
		if n++; bad != nil || n > MaxBatch {
			continue // the rest is read only to check the text
		}
		var item any
		switch any(*new(T)).(type) {
		case jsontext.Value:
			item = v.Clone() // v is valid only until the next read
		case string:
			switch v.Kind() {
			case '"':
				s, err := jsontext.AppendUnquote(nil, v)
				if err != nil {
					return nil, 0, nil, err
				}
				item = string(s)
			default:
				bad = errf(CodeBadRequest, key+": must be an array of strings")
				continue
			}
		}
		list = append(list, item.(T))
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, 0, nil, err
	}
	return list, n, bad, nil
}

// batch is POST /v1/infra/notification/mp/batch: every item is validated on its own, and the
// good ones are stored together as one atomic batch: all of them, or none. The bodies of the
// batches under way are bounded together (BatchRoom), so that concurrent batches cannot take
// the front end's memory. The answer lists
// each item's ucsId or its problems in request order; when the queue did not take the batch,
// it is 503 and no item has a ucsId.
func (s *Server) batch(c echo.Context) error {
	body, release, err := s.readBatch(c, claimsOf(c).Azp)
	if err != nil {
		return err
	}
	defer release()
	answerInTime(c)
	raw, perr := decodeList[jsontext.Value](body, "messages")
	if perr != nil {
		return perr
	}
	key, kerr := idempotencyKey(c, body)
	if kerr != nil {
		return kerr
	}
	items := make([]notification.Item, len(raw))
	for i, r := range raw {
		items[i].Req, items[i].Err = s.cfg.Push.Parse(r)
	}
	b, err := s.notify.PushBatch(c.Request().Context(), claimsOf(c).Azp, items, key)
	if err != nil {
		return notificationError(err)
	}
	ans := batchAnswer{Accepted: b.Accepted, Rejected: b.Rejected, Results: make([]batchItem, len(b.Items))}
	for i, it := range b.Items {
		ans.Results[i] = batchItem{Index: i, UcsID: it.UcsID}
		switch {
		case errors.Is(it.Err, notification.ErrItemUnconfirmed):
			ans.Results[i].Errors = []string{unconfirmedItem}
		case errors.Is(it.Err, notification.ErrNotTaken) && b.Unchecked:
			ans.Results[i].Errors = []string{uncheckedItem}
		case errors.Is(it.Err, notification.ErrNotTaken):
			ans.Results[i].Errors = []string{queueUnavailableItem}
		case it.Err != nil:
			ans.Results[i].Errors = itemErrors(it.Err)
		}
	}
	if b.Unavailable {
		// As for a single push: a full queue is worth a longer wait than a passing fault.
		retry, msg := "5", "the push queue is unavailable; no item was accepted, send the batch again (with the same Idempotency-Key, if it had one)"
		switch {
		case b.Full:
			retry, msg = "30", "the push queue is full; no item was accepted, send the batch again (with the same Idempotency-Key, if it had one)"
		case b.Unchecked:
			msg = "Idempotency-Key: whether the earlier request under this key went through cannot be checked now (the store is unavailable); no item was accepted, send the batch again later with the same key"
		case b.Unconfirmed:
			msg = "the push queue did not confirm storing the batch, whose good items may all be stored under their ucsIds: look one up before sending the batch again (with the same Idempotency-Key, if it had one, sending it again is safe)"
		}
		c.Response().Header().Set("Retry-After", retry)
		return c.JSON(http.StatusServiceUnavailable, Envelope{Data: ans, Code: CodeUnavailable, Msg: msg, Time: s.stamp()})
	}
	return s.ok(c, ans)
}

// itemErrors lists the problems of a batch item, each as "field: rule", at most
// push.MaxListedProblems of them and then the count of the rest.
func itemErrors(err error) []string {
	var ve *push.ValidationError
	if !errors.As(err, &ve) {
		return []string{"body: invalid"}
	}
	return ve.Lines()
}

// batchResults is POST /v1/infra/notification/mp/results: the results of up to MaxBatch ucsIds in
// request order, found as a single lookup finds them (notification.Service.Results), in a
// bounded number of round trips.
func (s *Server) batchResults(c echo.Context) error {
	body, err := readJSON(c, MaxBatch*64+64<<10)
	if err != nil {
		return err
	}
	ids, perr := decodeList[string](body, "ucsIds")
	if perr != nil {
		return perr
	}
	found, err := s.notify.Results(c.Request().Context(), claimsOf(c).Azp, ids)
	if err != nil {
		return notificationError(err)
	}
	out := make([]any, len(ids))
	for i, l := range found {
		if !l.Found {
			out[i] = notFoundItem{UcsID: ids[i], State: "not_found"}
			continue
		}
		out[i] = resultView(l.Result, s.loc)
	}
	return s.ok(c, struct {
		Results []any `json:"results"`
	}{out})
}

type notFoundItem struct {
	UcsID string `json:"ucsId"`
	State string `json:"state"`
}
