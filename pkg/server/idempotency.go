package server

import (
	"github.com/labstack/echo/v4"

	"github.com/campus-it/ucs/pkg/notification"
)

// idempotencyKey reads the request's Idempotency-Key, which comes with body: the zero Key
// without one; a 400 for a value the description's pattern refuses, or a header given twice.
// What a key does is the notification service's (notification.Key).
func idempotencyKey(c echo.Context, body []byte) (notification.Key, error) {
	h := c.Request().Header
	key := h.Get("Idempotency-Key")
	if key == "" && len(h.Values("Idempotency-Key")) == 0 {
		return notification.Key{}, nil
	}
	if !validIdempotencyKey(key) || len(h.Values("Idempotency-Key")) > 1 {
		return notification.Key{}, errf(CodeBadRequest, "Idempotency-Key: must be 1 to 128 printable ASCII characters other than space, given once")
	}
	return notification.Key{Name: key, Body: body}, nil
}

// validIdempotencyKey: 1 to 128 characters from '!' to '~', the description's pattern
// ^[!-~]{1,128}$. Space is left out because HTTP trims it at either end of a header value.
func validIdempotencyKey(k string) bool {
	if len(k) < 1 || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < '!' || k[i] > '~' {
			return false
		}
	}
	return true
}
