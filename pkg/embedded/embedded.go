// Package embedded starts the real servers the service depends on inside the process: a NATS
// server with JetStream and FerretDB (the MongoDB wire protocol over SQLite). Standalone mode
// runs on them, and so do the tests, so the same driver code runs everywhere.
package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	_ "modernc.org/sqlite" // the SQLite driver FerretDB itself uses

	"github.com/campus-it/ucs/pkg/secretfile"
)

// NATS is a running embedded NATS server.
type NATS struct {
	srv *natsserver.Server
}

// NATSOptions configures StartNATS.
type NATSOptions struct {
	// Dir keeps JetStream's files; a restart with the same Dir keeps every stream.
	Dir string
	// Host and Port to listen on; Port 0 lets the OS choose. Default host 127.0.0.1.
	Host string
	Port int
	// SyncAlways fsyncs every message before the PubAck. Without it a killed process still
	// loses nothing (written data is in the kernel's cache); it guards against power loss, which
	// production covers with a replicated cluster instead.
	SyncAlways bool
	// Name of the server; default ucs-embedded. Each server of a cluster has its own.
	Name string
	// Cluster, when set, makes the server one node of a JetStream cluster: its name, the
	// port it takes routes on, and the route URLs of every node (nats-route://host:port).
	Cluster *ClusterOptions
	// User and Password, when set, are the only credentials the server accepts: a client
	// without them is refused (clients give them in the URL, nats://user:password@host:port).
	User, Password string
}

// ClusterOptions make an embedded server a node of a cluster, as the drills run one.
type ClusterOptions struct {
	Name   string
	Port   int
	Routes []string
}

// StartNATS starts a NATS server with JetStream and waits until it accepts connections.
func StartNATS(o NATSOptions) (*NATS, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	port := o.Port
	if port == 0 {
		port = natsserver.RANDOM_PORT
	}
	if err := secretfile.PrivateDir(o.Dir); err != nil {
		return nil, fmt.Errorf("nats store dir: %w", err)
	}
	if o.Name == "" {
		o.Name = "ucs-embedded"
	}
	opts := &natsserver.Options{
		ServerName: o.Name,
		Host:       o.Host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.Dir,
		SyncAlways: o.SyncAlways,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: 1 << 20,
		Username:   o.User,
		Password:   o.Password,
	}
	if c := o.Cluster; c != nil {
		opts.Cluster = natsserver.ClusterOpts{Name: c.Name, Host: o.Host, Port: c.Port}
		opts.Routes = natsserver.RoutesFromStr(strings.Join(c.Routes, ","))
	}
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("nats server not ready within 30s")
	}
	return &NATS{srv: srv}, nil
}

// URL is the address clients connect to.
func (n *NATS) URL() string { return n.srv.ClientURL() }

// InProcess lets a client in this process connect without the network
// (nats.InProcessServer): no socket, no system call per message.
func (n *NATS) InProcess() nats.InProcessConnProvider { return n.srv }

// Clients is how many client connections the server holds.
func (n *NATS) Clients() int { return n.srv.NumClients() }

// Shutdown stops the server and waits for it.
func (n *NATS) Shutdown() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// FerretDB is a running embedded FerretDB.
type FerretDB struct {
	dir    string
	uri    string
	cancel context.CancelFunc
	done   chan struct{}
}

// FerretDBOptions configures StartFerretDB.
type FerretDBOptions struct {
	// Dir keeps the SQLite files, one per database.
	Dir string
	// Addr to listen on; default 127.0.0.1:0 (the OS chooses the port).
	Addr string
	// CredentialsDir, when set, makes the server take only clients that present the client
	// certificate kept there: it listens with TLS and requires a certificate of its own
	// authority, and URI names the files the MongoDB driver needs. The certificates are
	// generated at first start (folder 0700, files 0600) and kept.
	CredentialsDir string
	// Logger for FerretDB's own messages; nil keeps only errors, on standard error (FerretDB
	// warns of every command it does not implement, which the store expects and handles).
	Logger *slog.Logger
}

// sqlitePragmas tune the SQLite files under FerretDB (which adds WAL mode itself).
// synchronous(normal): in WAL mode a commit is durable once written, without an fsync of its
// own; a killed process loses nothing, a power cut may lose the last commits, the same promise
// the embedded NATS server makes (production runs a replicated MongoDB). cache_size(-256):
// 256 KiB of page cache per connection, of which FerretDB keeps up to 100; the files stay in the
// operating system's cache anyway.
const sqlitePragmas = "_pragma=synchronous(normal)&_pragma=cache_size(-256)"

// lazyAttrs is a slog.Handler that formats attributes added with Logger.With only when a record
// is written. FerretDB derives a logger from the SQL statement and its arguments (whole
// documents) for every statement it runs, to log it at Debug; slog's own handlers format those
// attributes at once, drop the Debug line, and so spent a tenth of the standalone stack's
// processor time under a delivery load on quoting documents nobody reads.
type lazyAttrs struct {
	h     slog.Handler
	attrs []slog.Attr
}

func (l *lazyAttrs) handler() slog.Handler {
	if len(l.attrs) == 0 {
		return l.h
	}
	return l.h.WithAttrs(l.attrs)
}

// Enabled reports whether the underlying handler takes records at level.
func (l *lazyAttrs) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

// Handle writes r with the attributes kept so far.
func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return l.handler().Handle(ctx, r)
}

// WithAttrs keeps attrs unformatted.
func (l *lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &lazyAttrs{h: l.h, attrs: append(slices.Clip(l.attrs), attrs...)}
}

// WithGroup applies the attributes kept so far, then opens the group.
func (l *lazyAttrs) WithGroup(name string) slog.Handler {
	return &lazyAttrs{h: l.handler().WithGroup(name)}
}

// StartFerretDB starts FerretDB with the SQLite backend.
func StartFerretDB(o FerretDBOptions) (*FerretDB, error) {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	o.Logger = slog.New(&lazyAttrs{h: o.Logger.Handler()})
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := secretfile.PrivateDir(dir); err != nil {
		return nil, fmt.Errorf("ferretdb dir: %w", err)
	}
	listener := ferretdb.ListenerConfig{TCP: o.Addr}
	if c := o.CredentialsDir; c != "" {
		if c, err = filepath.Abs(c); err != nil {
			return nil, err
		}
		if err := ensureCredentials(c); err != nil {
			return nil, fmt.Errorf("ferretdb credentials: %w", err)
		}
		o.CredentialsDir = c
		listener = ferretdb.ListenerConfig{TLS: o.Addr, TLSCertFile: filepath.Join(c, serverCertFile),
			TLSKeyFile: filepath.Join(c, serverKeyFile), TLSCAFile: filepath.Join(c, caFile)}
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  listener,
		Handler:   "sqlite",
		SQLiteURL: "file:" + dir + "/?" + sqlitePragmas,
		Logger:    o.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("ferretdb: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	uri := f.MongoDBURI()
	if o.CredentialsDir != "" {
		u, err := url.Parse(uri)
		if err != nil {
			cancel()
			<-done
			return nil, fmt.Errorf("ferretdb address: %w", err)
		}
		uri = tlsURI(u.Host, o.CredentialsDir)
	}
	return &FerretDB{dir: dir, uri: uri, cancel: cancel, done: done}, nil
}

// URI is the MongoDB connection string of the server.
func (f *FerretDB) URI() string { return f.uri }

// Shutdown stops the server and waits for it.
func (f *FerretDB) Shutdown() {
	f.cancel()
	<-f.done
}

// IndexIDs gives every collection of database an index that lets the SQLite backend find a
// document by _id without reading the whole table. FerretDB v1.24 indexes _id as the
// expression `_ferretdb_sjson->"_id"` but filters on `_ferretdb_sjson->'$._id'`, which SQLite
// does not match to that index, so every lookup by _id scans (11 ms at 20,000 documents; 0.4 ms
// with this index). The index is invisible to FerretDB and goes with its table. Call it after
// the collections exist; calling it again is harmless.
func (f *FerretDB) IndexIDs(ctx context.Context, database string) error {
	path := filepath.Join(f.dir, database+".sqlite")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("database %s: %w", database, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM _ferretdb_collections`)
	if err != nil {
		return fmt.Errorf("list collections of %s: %w", database, err)
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (_ferretdb_sjson->'$._id')`,
			quoteIdent(t+"_ucs_id_lookup"), quoteIdent(t))
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("index %s: %w", t, err)
		}
	}
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
