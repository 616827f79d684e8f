package simulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Subscribe makes openid follow the account and pushes a subscribe event to
// the callback URL, returning once the push was delivered (or failed after
// its retries). Without a callback URL it only marks the follower.
func (s *Simulator) Subscribe(ctx context.Context, openid string) error {
	if openid == "" {
		return errors.New("simulator: subscribe: empty openid")
	}
	s.AddFollower(openid)
	return s.pushNow(ctx, openid, eventSubscribe)
}

// Unsubscribe makes openid stop following the account and pushes an
// unsubscribe event, as Subscribe does.
func (s *Simulator) Unsubscribe(ctx context.Context, openid string) error {
	if openid == "" {
		return errors.New("simulator: unsubscribe: empty openid")
	}
	s.RemoveFollower(openid)
	return s.pushNow(ctx, openid, eventUnsubscribe)
}

func (s *Simulator) pushNow(ctx context.Context, openid, name string) error {
	if s.callbackURL == nil {
		return nil
	}
	e := event{openid: openid, created: s.now().Unix(), name: name}
	if err := s.deliver(ctx, &e, nil); err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	return nil
}

// faultsJSON is the admin API's form of Faults: durations as strings such as
// "50ms".
type faultsJSON struct {
	BusyRate        float64 `json:"busy_rate"`
	Latency         string  `json:"latency"`
	BlockRate       float64 `json:"block_rate"`
	SystemFailRate  float64 `json:"system_fail_rate"`
	ServerErrorRate float64 `json:"server_error_rate"`
	QuotaUsedUp     bool    `json:"quota_used_up"`
	AddressRefused  bool    `json:"address_refused"`
}

// MarshalJSON writes f with its latency as a duration string ("50ms").
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		BusyRate:        f.BusyRate,
		Latency:         f.Latency.String(),
		BlockRate:       f.BlockRate,
		SystemFailRate:  f.SystemFailRate,
		ServerErrorRate: f.ServerErrorRate,
		QuotaUsedUp:     f.QuotaUsedUp,
		AddressRefused:  f.AddressRefused,
	})
}

// UnmarshalJSON reads the form MarshalJSON writes; fields left out are zero.
// It reports every rate outside 0..1 and a latency that is not a
// non-negative duration, all at once.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	var problems []string
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"busy_rate", j.BusyRate}, {"block_rate", j.BlockRate},
		{"system_fail_rate", j.SystemFailRate}, {"server_error_rate", j.ServerErrorRate},
	} {
		if !(r.v >= 0 && r.v <= 1) {
			problems = append(problems, fmt.Sprintf("%s: %v is not between 0 and 1", r.name, r.v))
		}
	}
	var latency time.Duration
	if j.Latency != "" {
		d, err := time.ParseDuration(j.Latency)
		if err != nil || d < 0 {
			problems = append(problems, fmt.Sprintf("latency: %q is not a duration such as \"50ms\"", j.Latency))
		}
		latency = d
	}
	if len(problems) > 0 {
		return errors.New("faults: " + strings.Join(problems, "; "))
	}
	*f = Faults{
		BusyRate:        j.BusyRate,
		Latency:         latency,
		BlockRate:       j.BlockRate,
		SystemFailRate:  j.SystemFailRate,
		ServerErrorRate: j.ServerErrorRate,
		QuotaUsedUp:     j.QuotaUsedUp,
		AddressRefused:  j.AddressRefused,
	}
	return nil
}

// adminRoutes registers the admin API, JSON in and out:
//
//	GET    /sim/messages[?client_msg_id=…&touser=…]  accepted sends
//	GET    /sim/faults                               faults in force
//	POST   /sim/faults                               replace them (a Faults object)
//	POST   /sim/followers      {"openid":…}          add a follower
//	DELETE /sim/followers      {"openid":…}          remove one (sends: 43004)
//	POST   /sim/refusing       {"openid":…,"refusing":true}  sends: 43101
//	POST   /sim/subscribe      {"openid":…}          follow and push the event
//	POST   /sim/unsubscribe    {"openid":…}          unfollow and push the event
//	POST   /sim/templates      {"template_id":…,"keywords":["thing1",…]}
//	GET    /sim/stats                                counters
func (s *Simulator) adminRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /sim/messages", s.adminMessages)
	mux.HandleFunc("GET /sim/faults", func(w http.ResponseWriter, r *http.Request) {
		writeAdmin(w, http.StatusOK, s.Faults())
	})
	mux.HandleFunc("POST /sim/faults", s.adminSetFaults)
	mux.HandleFunc("POST /sim/followers", s.adminOpenID(func(_ context.Context, o openidBody) error {
		s.AddFollower(o.OpenID)
		return nil
	}))
	mux.HandleFunc("DELETE /sim/followers", s.adminOpenID(func(_ context.Context, o openidBody) error {
		s.RemoveFollower(o.OpenID)
		return nil
	}))
	mux.HandleFunc("POST /sim/refusing", s.adminOpenID(func(_ context.Context, o openidBody) error {
		s.SetRefusing(o.OpenID, o.Refusing)
		return nil
	}))
	mux.HandleFunc("POST /sim/subscribe", s.adminOpenID(func(ctx context.Context, o openidBody) error {
		return s.Subscribe(ctx, o.OpenID)
	}))
	mux.HandleFunc("POST /sim/unsubscribe", s.adminOpenID(func(ctx context.Context, o openidBody) error {
		return s.Unsubscribe(ctx, o.OpenID)
	}))
	mux.HandleFunc("POST /sim/templates", s.adminAddTemplate)
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, r *http.Request) {
		writeAdmin(w, http.StatusOK, s.Stats())
	})
}

func (s *Simulator) adminMessages(w http.ResponseWriter, r *http.Request) {
	cid, user := r.URL.Query().Get("client_msg_id"), r.URL.Query().Get("touser")
	all := s.Sent()
	out := all[:0]
	for _, m := range all {
		if (cid == "" || m.ClientMsgID == cid) && (user == "" || m.ToUser == user) {
			out = append(out, m)
		}
	}
	writeAdmin(w, http.StatusOK, out)
}

func (s *Simulator) adminSetFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := readAdmin(w, r, &f); err != nil {
		writeAdminError(w, http.StatusBadRequest, err)
		return
	}
	s.SetFaults(f)
	writeAdmin(w, http.StatusOK, s.Faults())
}

type openidBody struct {
	OpenID   string `json:"openid"`
	Refusing bool   `json:"refusing"`
}

func (s *Simulator) adminOpenID(do func(context.Context, openidBody) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var o openidBody
		if err := readAdmin(w, r, &o); err != nil {
			writeAdminError(w, http.StatusBadRequest, err)
			return
		}
		if o.OpenID == "" {
			writeAdminError(w, http.StatusBadRequest, errors.New("openid: required"))
			return
		}
		if err := do(r.Context(), o); err != nil {
			// The simulator itself worked; the receiver of the push did not.
			writeAdminError(w, http.StatusBadGateway, err)
			return
		}
		writeAdmin(w, http.StatusOK, map[string]string{"openid": o.OpenID})
	}
}

func (s *Simulator) adminAddTemplate(w http.ResponseWriter, r *http.Request) {
	var t struct {
		TemplateID string   `json:"template_id"`
		Keywords   []string `json:"keywords"`
	}
	if err := readAdmin(w, r, &t); err != nil {
		writeAdminError(w, http.StatusBadRequest, err)
		return
	}
	if t.TemplateID == "" || len(t.Keywords) == 0 {
		writeAdminError(w, http.StatusBadRequest, errors.New("template_id and keywords: required"))
		return
	}
	s.AddTemplate(t.TemplateID, t.Keywords)
	writeAdmin(w, http.StatusOK, t)
}

func readAdmin(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty body; a JSON object is required")
		}
		return err
	}
	return nil
}

func writeAdmin(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeAdminError(w http.ResponseWriter, status int, err error) {
	writeAdmin(w, status, map[string]string{"error": err.Error()})
}
