package simulator_test

import (
	"fmt"
	"testing"

	"github.com/campus-it/ucs/pkg/platform/simulator"
)

// TestRecent checks that Recent answers the latest sends to one follower, newest first, sent
// over HTTP as the platform receives them.
func TestRecent(t *testing.T) {
	e := newEnv(t, simulator.Config{})
	const other = "oOther00000000000000000000002"
	e.sim.AddFollower(other)
	tok := e.token(t, false).AccessToken
	for i := range 5 {
		to := follower
		if i%2 == 1 {
			to = other
		}
		if a := e.send(t, tok, examMessage(to, fmt.Sprint("ucs-", i))); a.ErrCode != 0 {
			t.Fatalf("send %d: %+v", i, a)
		}
	}
	got := e.sim.Recent(follower, 2)
	if len(got) != 2 || got[0].ClientMsgID != "ucs-4" || got[1].ClientMsgID != "ucs-2" || got[0].Data["thing1"] != "高等数学期末考试" {
		t.Fatalf("recent: %+v", got)
	}
	got[0].Data["thing1"] = "changed"
	if e.sim.Recent(follower, 1)[0].Data["thing1"] != "高等数学期末考试" {
		t.Error("Recent handed out the simulator's own map")
	}
	if n := len(e.sim.Recent(other, 10)); n != 2 {
		t.Errorf("%d sends to the other follower, want 2", n)
	}
}
