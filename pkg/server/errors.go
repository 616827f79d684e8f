package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// Code is the status code in the envelope of a data interface's answer.
type Code string

// The envelope codes. A00000 is the interface's success code; the others are ours.
const (
	CodeOK           Code = "A00000"
	CodeBadRequest   Code = "A00400"
	CodeUnauthorized Code = "A00401"
	CodeNotFound     Code = "A00404"
	CodeMethod       Code = "A00405"
	CodeConflict     Code = "A00409"
	CodeKeyReused    Code = "A00422"
	CodeTooLarge     Code = "A00413"
	CodeMediaType    Code = "A00415"
	CodeInternal     Code = "A00500"
	CodeUnavailable  Code = "A00503"
)

var statusOf = map[Code]int{
	CodeOK:           http.StatusOK,
	CodeBadRequest:   http.StatusBadRequest,
	CodeUnauthorized: http.StatusUnauthorized,
	CodeNotFound:     http.StatusNotFound,
	CodeMethod:       http.StatusMethodNotAllowed,
	CodeConflict:     http.StatusConflict,
	CodeKeyReused:    http.StatusUnprocessableEntity,
	CodeTooLarge:     http.StatusRequestEntityTooLarge,
	CodeMediaType:    http.StatusUnsupportedMediaType,
	CodeInternal:     http.StatusInternalServerError,
	CodeUnavailable:  http.StatusServiceUnavailable,
}

// Error is the one error type of the data interfaces: a code and a message for the caller.
// Internal errors never reach the caller's text; they are logged with the request.
type Error struct {
	Code    Code
	Message string
	// Header is set on the response (WWW-Authenticate on a 401, say).
	Header http.Header
	// Internal is logged, never sent.
	Internal error
}

// Error returns the message.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the internal cause.
func (e *Error) Unwrap() error { return e.Internal }

func errf(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// Envelope is the body of every data interface's answer.
type Envelope struct {
	Data any    `json:"data"`
	Code Code   `json:"code"`
	Msg  string `json:"msg"`
	Time string `json:"time"`
}

const timeLayout = "2006-01-02 15:04:05.000"

func (s *Server) stamp() string { return s.now().In(s.loc).Format(timeLayout) }

// local is t in the configured time zone, in which pages show times as answers do.
func (s *Server) local(t time.Time) time.Time { return t.In(s.loc) }

func (s *Server) ok(c echo.Context, data any) error {
	return c.JSON(http.StatusOK, Envelope{Data: data, Code: CodeOK, Msg: "success", Time: s.stamp()})
}

// ctxBrowserPage marks a request of a page a person's browser opens (see browserPage).
const ctxBrowserPage = "ucs.browser_page"

// browserPage marks the routes of pages a person opens (sign-in, consent, logout, the account,
// binding and operations pages): an error they end with (the store unreachable, an internal
// fault) is answered with the error page in Chinese and English, not the data interfaces' JSON.
func browserPage(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Set(ctxBrowserPage, true)
		return next(c)
	}
}

// handleError is echo's HTTPErrorHandler: the one place that maps errors to statuses and
// envelopes. OAuth endpoints answer their own errors before this is reached.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var e *Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &e):
	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			e = errf(CodeNotFound, "no such interface: "+c.Request().Method+" "+c.Request().URL.Path)
		case http.StatusMethodNotAllowed:
			e = errf(CodeMethod, "method "+c.Request().Method+" is not allowed here")
		case http.StatusRequestEntityTooLarge:
			e = errf(CodeTooLarge, "body too large")
		default:
			e = &Error{Code: CodeInternal, Message: "internal error", Internal: err}
			if he.Code >= 400 && he.Code < 500 {
				e = errf(CodeBadRequest, http.StatusText(he.Code))
			}
		}
	default:
		e = &Error{Code: CodeInternal, Message: "internal error", Internal: err}
	}
	status := statusOf[e.Code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if e.Internal != nil || status >= 500 {
		s.log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "status", status, "err", err)
	}
	for k, v := range e.Header {
		c.Response().Header()[k] = v
	}
	if page, _ := c.Get(ctxBrowserPage).(bool); page && status >= 500 {
		// A person reads this, in the platform's browser or any other: the page in Chinese
		// and English, as every refusal of these pages is (net/http drops a HEAD's body).
		_ = s.errorPage(c, status, "暂时无法完成 Not done just now",
			"服务暂时无法完成这一步，请稍后再试。 The service could not complete this step just now. Try again in a moment.",
			"temporarily_unavailable")
		return
	}
	if c.Request().Method == http.MethodHead {
		// The headers a GET would have, without the body.
		c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, Envelope{Data: nil, Code: e.Code, Msg: e.Message, Time: s.now().In(s.loc).Format(timeLayout)})
}

// jsonAnswers writes the data interfaces' answers as echo does, but with <, > and & as they are
// rather than \u003c, \u003e and \u0026: the answers are application/json, never HTML, and a
// batch's answer, which names each item's problems (the keys it gave among them), would
// otherwise grow to six times a body of such characters, past the room its batch was given.
type jsonAnswers struct{ echo.DefaultJSONSerializer }

// Serialize writes i as JSON.
func (jsonAnswers) Serialize(c echo.Context, i any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(i)
}
