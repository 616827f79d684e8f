package cas

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	// namespace is the XML namespace of every CAS service response.
	namespace = "http://www.yale.edu/tp/cas"
	// ticketPrefix starts every service ticket (CAS protocol 3.0, 3.1.1).
	ticketPrefix = "ST-"
	// maxTicketBytes is far above the 256 characters the protocol asks
	// services to accept; it only stops a junk parameter from being
	// forwarded to the CAS server.
	maxTicketBytes = 2048
	// redactedTicket replaces the ticket in failure messages, which servers
	// usually word as "Ticket ST-… not recognized".
	redactedTicket = "ST-(redacted)"
)

// Principal is the user a service ticket was issued to, as the CAS server
// released it.
type Principal struct {
	// User is the content of cas:user, trimmed: the campus user number.
	User string
	// Attributes holds each child element of cas:attributes by its local
	// name, values trimmed and in document order; an element that appears
	// several times gives several values. CAS servers add their own, such as
	// "authenticationDate" and "isFromNewLogin". Never nil.
	Attributes map[string][]string
}

// AuthenticatedAt is when the user last typed credentials at the CAS server, by this
// service's clock: now for a new login (isFromNewLogin "true"), which happened during this
// sign-in whatever the CAS server's clock says; for a single sign-on answer, its
// authenticationDate (ISO 8601 as Java's ZonedDateTime writes it: seconds left out when zero,
// and a "[Zone/Name]" after it), if not later than now. Without a readable date the single
// sign-on's age is unknown and it is taken as now, as the CAS 2.0 protocol gives no more.
func (p Principal) AuthenticatedAt(now time.Time) time.Time {
	if v := p.Attributes["isFromNewLogin"]; len(v) > 0 && v[0] == "true" {
		return now
	}
	v := p.Attributes["authenticationDate"]
	if len(v) == 0 {
		return now
	}
	s, _, _ := strings.Cut(v[0], "[")
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil && !t.After(now) {
			return t
		}
	}
	return now
}

// Validate checks a service ticket with the CAS server, calling
// {base}/p3/serviceValidate?service=…&ticket=…, and returns the user it was
// issued to. service must be exactly the URL given to LoginURL: a CAS server
// binds each ticket to its service. A ticket can be validated only once.
//
// The errors tell apart who is at fault: ErrMalformedTicket (wrapped) or an
// *Error when the ticket is refused, ErrBadAnswer (wrapped) when the answer
// is unusable, and the transport's error (wrapped; errors.Is works with
// context.Canceled and the like) when the server could not be reached.
// None of them contains the ticket.
func (c *Client) Validate(ctx context.Context, ticket, service string) (Principal, error) {
	return c.validate(ctx, ticket, service, false)
}

// ValidateRenewed is Validate for a sign-in begun with LoginURL(service, true): it sends
// renew=true, so that the CAS server refuses a ticket its single sign-on issued without the
// user signing in again (the browser may have dropped renew from the login address).
func (c *Client) ValidateRenewed(ctx context.Context, ticket, service string) (Principal, error) {
	return c.validate(ctx, ticket, service, true)
}

func (c *Client) validate(ctx context.Context, ticket, service string, renew bool) (Principal, error) {
	if err := checkTicket(ticket); err != nil {
		return Principal{}, err
	}
	if service == "" {
		return Principal{}, errors.New("cas: validate: empty service")
	}
	target := c.validateURL + "?service=" + url.QueryEscape(service) + "&ticket=" + url.QueryEscape(ticket)
	if renew {
		target += "&renew=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return Principal{}, fmt.Errorf("cas: validate: %w", c.hideTicket(err))
	}
	req.Header.Set("Accept", "application/xml, text/xml")
	resp, err := c.http.Do(req)
	if err != nil {
		return Principal{}, fmt.Errorf("cas: validate: %w", c.hideTicket(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drained so that the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
		return Principal{}, fmt.Errorf("%w: HTTP status %d", ErrBadAnswer, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return Principal{}, fmt.Errorf("cas: validate: reading the answer: %w", err)
	}
	if len(body) > maxAnswerBytes {
		return Principal{}, fmt.Errorf("%w: larger than %d bytes", ErrBadAnswer, maxAnswerBytes)
	}
	return parseResponse(body, ticket)
}

// checkTicket refuses what cannot be a service ticket before it is sent
// anywhere. The character set is not checked: deployed servers append their
// host name (with dots) to ticket ids.
func checkTicket(ticket string) error {
	switch {
	case ticket == "":
		return fmt.Errorf("%w: empty", ErrMalformedTicket)
	case !strings.HasPrefix(ticket, ticketPrefix):
		return fmt.Errorf("%w: it does not start with %q", ErrMalformedTicket, ticketPrefix)
	case len(ticket) > maxTicketBytes:
		return fmt.Errorf("%w: longer than %d bytes", ErrMalformedTicket, maxTicketBytes)
	}
	return nil
}

// hideTicket keeps the ticket out of a transport error: *url.Error quotes
// the whole request URL, query included, and such errors end up in logs.
func (c *Client) hideTicket(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: c.validateURL, Err: ue.Err}
	}
	return err
}

// serviceResponse is the CAS 3.0 validation answer (protocol appendix A).
// Success, failure and attributes are slices so that repeated elements are
// seen rather than silently overwritten.
type serviceResponse struct {
	XMLName xml.Name         `xml:"http://www.yale.edu/tp/cas serviceResponse"`
	Success []authSuccess    `xml:"http://www.yale.edu/tp/cas authenticationSuccess"`
	Failure []authFailure    `xml:"http://www.yale.edu/tp/cas authenticationFailure"`
	Other   []xmlElementName `xml:",any"`
}

type authSuccess struct {
	User       []string        `xml:"http://www.yale.edu/tp/cas user"`
	Attributes []attributeList `xml:"http://www.yale.edu/tp/cas attributes"`
}

type attributeList struct {
	Items []attributeItem `xml:",any"`
}

type attributeItem struct {
	XMLName xml.Name
	Value   string `xml:",chardata"`
}

type authFailure struct {
	Code    string `xml:"code,attr"`
	Message string `xml:",chardata"`
}

// xmlElementName records an element that is neither a success nor a
// failure (a proxySuccess, say), only to name it in the error.
type xmlElementName struct {
	XMLName xml.Name
}

// parseResponse reads a validation answer. ticket is only used to remove it
// from the failure message.
func parseResponse(body []byte, ticket string) (Principal, error) {
	var r serviceResponse
	dec := xml.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		// The decoder quotes element names from the body; the text is kept,
		// not the error value, so that a ticket in it can be removed.
		return Principal{}, fmt.Errorf("%w: %s", ErrBadAnswer, redact(err.Error(), ticket))
	}
	switch {
	case len(r.Success)+len(r.Failure) > 1:
		return Principal{}, fmt.Errorf("%w: %d success and %d failure elements, want exactly one",
			ErrBadAnswer, len(r.Success), len(r.Failure))
	case len(r.Failure) == 1:
		return Principal{}, failure(r.Failure[0], ticket)
	case len(r.Success) == 1:
		return principal(r.Success[0])
	case len(r.Other) > 0:
		return Principal{}, fmt.Errorf("%w: neither authenticationSuccess nor authenticationFailure, but <%s>",
			ErrBadAnswer, redact(r.Other[0].XMLName.Local, ticket))
	}
	return Principal{}, fmt.Errorf("%w: neither authenticationSuccess nor authenticationFailure", ErrBadAnswer)
}

func failure(f authFailure, ticket string) *Error {
	return &Error{
		Code:    redact(strings.TrimSpace(f.Code), ticket),
		Message: redact(strings.TrimSpace(f.Message), ticket),
	}
}

// redact removes ticket from text that came from the server's answer.
func redact(text, ticket string) string {
	if ticket == "" {
		return text
	}
	return strings.ReplaceAll(text, ticket, redactedTicket)
}

func principal(s authSuccess) (Principal, error) {
	if len(s.User) != 1 {
		return Principal{}, fmt.Errorf("%w: %d cas:user elements in the success, want 1", ErrBadAnswer, len(s.User))
	}
	user := strings.TrimSpace(s.User[0])
	if user == "" {
		return Principal{}, fmt.Errorf("%w: empty cas:user in the success", ErrBadAnswer)
	}
	attrs := make(map[string][]string)
	for _, list := range s.Attributes {
		for _, it := range list.Items {
			// Only the CAS namespace: an element of another vocabulary that
			// happens to share a local name must not pose as a CAS attribute.
			if it.XMLName.Space != namespace {
				continue
			}
			attrs[it.XMLName.Local] = append(attrs[it.XMLName.Local], strings.TrimSpace(it.Value))
		}
	}
	return Principal{User: user, Attributes: attrs}, nil
}
