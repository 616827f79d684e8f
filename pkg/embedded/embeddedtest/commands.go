package embeddedtest

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/event"
)

// Command is one command the MongoDB driver sent.
type Command struct {
	Name, Collection string
	Body             bson.Raw
}

// Commands keeps the commands the MongoDB driver sends while it is on, for tests that check
// what a path asks of the store (store.Options.Monitor takes its Monitor).
type Commands struct {
	// Skip, when set, leaves out the commands it reports.
	Skip func(Command) bool

	mu   sync.Mutex
	on   bool
	cmds []Command
}

// Monitor is the command monitor that records into c.
func (c *Commands) Monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.on || e.DatabaseName == "admin" {
			return
		}
		coll, _ := e.Command.Lookup(e.CommandName).StringValueOK()
		cmd := Command{Name: e.CommandName, Collection: coll, Body: append(bson.Raw(nil), e.Command...)}
		if c.Skip != nil && c.Skip(cmd) {
			return
		}
		c.cmds = append(c.cmds, cmd)
	}}
}

// Record turns recording on or off.
func (c *Commands) Record(on bool) { c.mu.Lock(); c.on = on; c.mu.Unlock() }

// Take returns the commands recorded since the last Take.
func (c *Commands) Take() []Command {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmds := c.cmds
	c.cmds = nil
	return cmds
}

// Filters returns the filters of a command that reads, changes or deletes documents, and
// whether the command is one of those.
func (c Command) Filters() ([]bson.RawValue, bool) {
	switch c.Name {
	case "find", "count", "distinct":
		return []bson.RawValue{c.Body.Lookup("filter")}, true
	case "findAndModify":
		return []bson.RawValue{c.Body.Lookup("query")}, true
	case "update", "delete":
		field := map[string]string{"update": "updates", "delete": "deletes"}[c.Name]
		arr, ok := c.Body.Lookup(field).ArrayOK()
		if !ok {
			return []bson.RawValue{{}}, true // no statements to read: counted as a violation
		}
		vals, _ := arr.Values()
		var out []bson.RawValue
		for _, v := range vals {
			out = append(out, v.Document().Lookup("q"))
		}
		return out, true
	case "aggregate", "mapReduce":
		return []bson.RawValue{{}}, true // never by primary key
	}
	return nil, false
}

// ByID reports whether a filter is exactly {_id: <string or ObjectID>}: the one filter the
// embedded FerretDB answers from an index.
func ByID(f bson.RawValue) bool {
	doc, ok := f.DocumentOK()
	if !ok {
		return false
	}
	elems, err := doc.Elements()
	if err != nil || len(elems) != 1 || elems[0].Key() != "_id" {
		return false
	}
	t := elems[0].Value().Type
	return t == bson.TypeString || t == bson.TypeObjectID
}

// NotByID describes each filter of c that is not a single _id equality (ByID).
func (c Command) NotByID() []string {
	fs, _ := c.Filters()
	var out []string
	for _, f := range fs {
		if !ByID(f) {
			out = append(out, c.Name+" on "+c.Collection+" with filter "+f.String()+": not a single _id equality")
		}
	}
	return out
}
