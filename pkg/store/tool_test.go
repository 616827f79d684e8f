package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/event"

	"github.com/campus-it/ucs/pkg/embedded/embeddedtest"
	"github.com/campus-it/ucs/pkg/store"
)

// TestToolLeavesRetentionAlone: api admin opens the store with whatever configuration the
// operator gave it (a file with mongodb.uri alone, its retention the default 720h; or a bare
// "retention: 10", ten seconds, which the service refuses). Setting that retention on the
// delivery records' TTL indexes, as the service does at start (MongoDB rewrites an index whose
// expiry differs, with collMod), would delete every record older than it. A tool sends no such
// command; the service does.
func TestToolLeavesRetentionAlone(t *testing.T) {
	f := embeddedtest.FerretDB(t)
	db := embeddedtest.DBName(t)
	ttlCommands := func(tool bool) []string {
		var mu sync.Mutex
		var cmds []string
		m := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if (e.CommandName == "createIndexes" || e.CommandName == "collMod") && strings.Contains(e.Command.String(), "expireAfterSeconds") {
				mu.Lock()
				cmds = append(cmds, e.Command.String())
				mu.Unlock()
			}
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := store.Open(ctx, store.Options{URI: f.URI(), Database: db, Retention: 10 * time.Second, Tool: tool, Monitor: m})
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Close(ctx)
		mu.Lock()
		defer mu.Unlock()
		return cmds
	}
	if cmds := ttlCommands(false); len(cmds) == 0 {
		t.Fatal("the service's start set no retention on the TTL indexes: the check below would prove nothing")
	}
	if cmds := ttlCommands(true); len(cmds) > 0 {
		t.Errorf("an operator's tool sent %d commands setting its own retention on the TTL indexes, e.g.\n%s", len(cmds), cmds[0])
	}
}
