// Package admin holds the operators' commands, `api admin …`: registered clients, bindings of
// campus user numbers to the official account's followers, a test push, and the official
// account's templates (checked against the configured mapping) and custom menu. They work on
// the configured MongoDB and platform account (-config FILE) or on a running standalone stack
// and its simulator (-data DIR), and never print a secret except a client's new secret, once.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/store"
)

// Exit codes of Run.
const (
	ExitOK      = 0 // the command did what it was asked
	ExitFailure = 1 // it could not: a store that does not answer, a client not found, rows rejected
	ExitUsage   = 2 // it was called wrongly: an unknown command or flag, a missing argument
)

// Env is what the commands take from the process.
type Env struct {
	Stdout, Stderr io.Writer
	// Terminal is true when Stderr is a terminal: progress bars are drawn only there.
	Terminal bool
	// Getenv reads the environment (MONGODB_URI overrides the file, as for the service;
	// UCS_CLIENT_SECRET for push test -client); nil reads nothing.
	Getenv func(string) string
	// HTTPClient talks to the front end (push test); nil: one with a 15 s timeout that follows
	// no redirect.
	HTTPClient *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (e *Env) fill() {
	if e.Stdout == nil {
		e.Stdout = io.Discard
	}
	if e.Stderr == nil {
		e.Stderr = io.Discard
	}
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if e.HTTPClient == nil {
		// No redirect is followed: a 307 from a gateway would post the client's secret again
		// to whatever host it named.
		e.HTTPClient = &http.Client{Timeout: 15 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if e.Now == nil {
		e.Now = time.Now
	}
}

// usageError is a command called wrongly: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// common are the flags every level takes: where to work, and how to answer.
type common struct {
	config string
	data   string
	json   bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", c.config, "the service's YAML configuration: work on its MongoDB")
	fs.StringVar(&c.data, "data", c.data, "data folder of a running standalone stack: work on its MongoDB (reads DIR/standalone.json)")
	fs.BoolVar(&c.json, "json", c.json, "answer in JSON, for scripts")
}

// command is one level of the command tree: a group (with subcommands) or a leaf (with run).
type command struct {
	name    string
	args    string // the arguments' synopsis, e.g. "CLIENT_ID"
	summary string
	// help says more than the summary, below the synopsis.
	help string
	// flags adds the leaf's own flags; it may be nil.
	flags func(fs *flag.FlagSet)
	// nargs is the number of arguments a leaf takes; -1: any.
	nargs int
	run   func(ctx context.Context, a *app, args []string) error
	sub   []*command
}

// app is one run of a command: its environment, the common flags, and what it opened.
type app struct {
	env Env
	common
	path string // "api admin clients create"
	st   *store.Store
	// cfg is the configuration of -config, or the defaults; baseURL the front end's address.
	cfg     *config.Config
	baseURL string
	// natsUser and natsPassword are a standalone stack's NATS credentials (standalone.json).
	natsUser, natsPassword string
	// loc is the service's time zone (time_zone), in which the commands show times, as the
	// service does, whatever the terminal's.
	loc *time.Location
}

// shown is t as the commands print it: in the service's time zone.
func (a *app) shown(t time.Time) string { return t.In(a.loc).Format(time.DateTime) }

// Run runs `api admin` with args (what follows "admin" on the command line) and returns the
// exit code.
func Run(ctx context.Context, args []string, env Env) int {
	env.fill()
	a := &app{env: env}
	err := a.dispatch(ctx, root(), "api admin", args)
	if a.st != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.st.Close(cctx)
		cancel()
	}
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(env.Stderr, "%s\nRun '%s --help' for usage.\n", ue.msg, a.path)
		return ExitUsage
	case errors.Is(err, errReported):
		return ExitFailure
	default:
		if a.json {
			a.writeJSON(env.Stdout, map[string]string{"error": err.Error()})
		}
		fmt.Fprintln(env.Stderr, "error:", err)
		return ExitFailure
	}
}

// errReported is a failure whose explanation has been written already.
var errReported = errors.New("failed")

func (a *app) dispatch(ctx context.Context, c *command, path string, args []string) error {
	a.path = path
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by Run; help goes to standard output
	a.common.register(fs)
	if c.flags != nil {
		c.flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.usage(c, path, fs)
			return err
		}
		return usagef("%v", err)
	}
	rest := fs.Args()
	if c.sub != nil {
		if len(rest) == 0 {
			return usagef("%s: a command is required", path)
		}
		if rest[0] == "help" {
			a.usage(c, path, fs)
			return flag.ErrHelp
		}
		for _, s := range c.sub {
			if s.name == rest[0] {
				return a.dispatch(ctx, s, path+" "+s.name, rest[1:])
			}
		}
		return usagef("%s: unknown command %q", path, rest[0])
	}
	// Flags may also follow the arguments (api admin clients show ID --json): parse what comes
	// after each argument too.
	var pos []string
	for len(rest) > 0 {
		pos = append(pos, rest[0])
		if err := fs.Parse(rest[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				a.usage(c, path, fs)
				return err
			}
			return usagef("%v", err)
		}
		rest = fs.Args()
	}
	if c.nargs >= 0 && len(pos) != c.nargs {
		if c.nargs == 0 {
			return usagef("%s takes no arguments, got %q", path, strings.Join(pos, " "))
		}
		return usagef("%s needs %s", path, c.args)
	}
	return c.run(ctx, a, pos)
}

// usage writes the help of c to standard output.
func (a *app) usage(c *command, path string, fs *flag.FlagSet) {
	w := a.env.Stdout
	if c.sub != nil {
		fmt.Fprintf(w, "Usage: %s [flags] COMMAND …\n\n", path)
	} else {
		fmt.Fprintf(w, "Usage: %s [flags] %s\n\n", path, c.args)
	}
	fmt.Fprintln(w, c.summary)
	if c.help != "" {
		fmt.Fprintln(w)
		fmt.Fprintln(w, strings.TrimSpace(c.help))
	}
	if c.sub != nil {
		fmt.Fprintln(w, "\nCommands:")
		for _, s := range c.sub {
			fmt.Fprintf(w, "  %-14s %s\n", s.name, s.summary)
		}
		fmt.Fprintf(w, "\nRun '%s COMMAND --help' for a command's flags.\n", path)
	}
	fmt.Fprintln(w, "\nFlags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nExit codes: 0 done, 1 failed, 2 wrong usage.")
}

func root() *command {
	return &command{
		name:    "admin",
		summary: "Operators' commands: registered clients, bindings of campus accounts to the official account, a test push, the account's templates and menu.",
		help: `
Work on the service's MongoDB with -config FILE (the file the service runs with; MONGODB_URI
overrides it), or on a running standalone stack with -data DIR (api -standalone -data DIR).
Flags may be given at any level: api admin -data ./data clients list --json.`,
		sub: []*command{clientsCommand(), bindingsCommand(), pushCommand(), platformCommand()},
	}
}

// open connects to the store of -config or -data, once.
func (a *app) open(ctx context.Context) (*store.Store, error) {
	if a.st != nil {
		return a.st, nil
	}
	if a.config == "" && a.data == "" {
		return nil, usagef("give -config FILE (the service's configuration) or -data DIR (a running standalone stack)")
	}
	cfg := &config.Config{}
	if a.config != "" {
		c, err := config.Load(a.config)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	cfg.ApplyEnv(a.env.Getenv)
	if a.data != "" {
		// The stack's embedded servers take new ports at every start: standalone.json says
		// where they are now.
		info, err := readStandalone(a.data)
		if err != nil {
			return nil, err
		}
		cfg.MongoDB.URI = info.MongoDBURI
		cfg.NATS.URL = info.NATSURL
		if info.NATS != nil {
			a.natsUser, a.natsPassword = info.NATS.User, info.NATS.Password
		}
		if cfg.PublicURL == "" || a.config == "" {
			cfg.PublicURL = info.BaseURL
		}
		if a.config == "" {
			cfg.TimeZone = info.TimeZone // the stack's, as it shows times
		}
	}
	cfg.Defaults()
	if cfg.MongoDB.URI == "" {
		return nil, fmt.Errorf("%s: mongodb.uri is not set (nor MONGODB_URI)", a.config)
	}
	loc, err := time.LoadLocation(cfg.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("time_zone: %w", err)
	}
	a.loc = loc
	a.cfg, a.baseURL = cfg, strings.TrimRight(cfg.PublicURL, "/")
	st, err := store.Open(ctx, store.Options{
		URI: cfg.MongoDB.URI, Database: cfg.MongoDB.Database,
		Now: a.env.Now, ConnectTimeout: 5 * time.Second, Tool: true,
	})
	if err != nil {
		if a.data != "" {
			return nil, fmt.Errorf("%w (is the standalone stack of %s running?)", err, a.data)
		}
		return nil, err
	}
	a.st = st
	return st, nil
}

// standaloneInfo is the part of a standalone stack's standalone.json the commands read.
type standaloneInfo struct {
	BaseURL    string `json:"base_url"`
	MongoDBURI string `json:"mongodb_uri"`
	NATSURL    string `json:"nats_url"`
	TimeZone   string `json:"time_zone"`
	NATS       *struct {
		User     string `json:"user"`
		Password string `json:"password"`
	} `json:"nats"`
}

func readStandalone(dir string) (standaloneInfo, error) {
	var info standaloneInfo
	path := filepath.Join(dir, "standalone.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("%s does not exist: start the stack first (go run ./api -standalone -data %s)", path, dir)
	}
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	if info.MongoDBURI == "" {
		return info, fmt.Errorf("%s: no mongodb_uri", path)
	}
	return info, nil
}

// writeJSON writes v as indented JSON with a final newline.
func (a *app) writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// out writes the answer: v as JSON under --json, otherwise what human writes.
func (a *app) out(v any, human func(w io.Writer)) {
	if a.json {
		a.writeJSON(a.env.Stdout, v)
		return
	}
	human(a.env.Stdout)
}
