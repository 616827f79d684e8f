package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestEncryptedPushInPlainModeRefused: the account was switched to safe mode on the platform
// (its address check is signed as in plain mode, so the switch is accepted) while the front
// end still runs without platform.encoding_aes_key. Its pushes carry an encrypted body, signed
// with the token. They are refused, with a log line naming the missing key, so that the
// platform pushes them again and its alarms show it, rather than answered success and lost.
func TestEncryptedPushInPlainModeRefused(t *testing.T) {
	var logs logLines
	e := newEnvLogged(t, nil, logs.logger()) // plain mode: no EncodingAESKey
	ctx := context.Background()
	sim := simulator.New(simulator.Config{AppID: safeAppID, Secret: "simulated-secret",
		CallbackURL: e.url + callbackPath, CallbackToken: cbToken, EncodingAESKey: aesKey,
		Now: e.clock.Now})
	t.Cleanup(sim.Close)
	simSrv := httptest.NewServer(sim.Handler())
	t.Cleanup(simSrv.Close)

	if !e.following("2020000001") {
		t.Fatal("precondition: 2020000001 follows")
	}
	// The user leaves the account; the platform pushes the (encrypted) unsubscribe.
	_ = sim.Unsubscribe(ctx, "oA")
	embeddedtest.Eventually(t, 10*time.Second, "the simulator's push answered or given up", func() bool {
		st := sim.Stats()
		return st.CallbacksPending == 0 && st.CallbacksDelivered+st.CallbacksFailed >= 1
	})
	e.applied(0)
	st := sim.Stats()
	t.Logf("simulator: delivered=%d failed=%d; front end following=%v", st.CallbacksDelivered, st.CallbacksFailed, e.following("2020000001"))
	if st.CallbacksDelivered != 0 {
		t.Fatalf("the front end answered the platform's encrypted unsubscribe with success: it is lost")
	}
	refused := logs.events(t, "callback_signature_invalid")
	if len(refused) == 0 || !strings.Contains(refused[0]["reason"].(string), "encoding_aes_key") {
		t.Fatalf("the refusal's log does not name the missing key: %v", refused)
	}
}
