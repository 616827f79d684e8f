package standalone_test

import (
	"context"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/standalone"
)

// TestSecretsStayPrivate: the data folder is 0700 and every file in it 0600 (a leftover
// temporary file of mode 0644 included); the embedded NATS server and FerretDB refuse a client
// without the credentials generated at first start, and take one with them; a restart keeps
// the credentials.
func TestSecretsStayPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "standalone.json.tmp"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	// Something written through both servers: a token, a push.
	tok := token(t, s.Info.BaseURL, standalone.DemoClient, clientSecret(t, s.Info, standalone.DemoClient))
	if st, m := call(t, "POST", s.Info.BaseURL+"/v1/infra/notification/mp", "application/json", tok,
		`{"userId":"`+standalone.DemoUsers[0]+`","type":"TDL","data":{"header":"h","type":"t","list":"l","step":"s","content":"c","remark":"r"}}`); st != 200 {
		t.Fatalf("push: %d %v", st, m)
	}

	files := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		switch {
		case d.IsDir():
			want = 0o700
		case !d.Type().IsRegular():
			return nil
		default:
			files++
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil || files < 5 {
		t.Fatalf("walking the data folder: %d files, %v", files, err)
	}

	// NATS: no credentials, wrong ones: refused; the generated ones: in.
	u, err := url.Parse(s.Info.NATSURL)
	if err != nil || u.User == nil {
		t.Fatalf("NATS URL without credentials: %v", err)
	}
	bare := *u
	bare.User = nil
	if nc, err := nats.Connect(bare.String(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("the embedded NATS server took a client without credentials")
	}
	wrong := bare
	wrong.User = url.UserPassword(u.User.Username(), "guess")
	if nc, err := nats.Connect(wrong.String(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("the embedded NATS server took a wrong password")
	}
	nc, err := nats.Connect(s.Info.NATSURL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("the generated credentials: %v", err)
	}
	nc.Close()

	// FerretDB: plain, or TLS without the client certificate: refused; the URI: in.
	mu, err := url.Parse(s.Info.MongoDBURI)
	if err != nil {
		t.Fatal(err)
	}
	ping := func(uri string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c, err := mongo.Connect(ctx, options.Client().ApplyURI(uri).SetServerSelectionTimeout(2*time.Second).SetConnectTimeout(2*time.Second))
		if err != nil {
			return err
		}
		defer func() { _ = c.Disconnect(context.Background()) }()
		if err := c.Ping(ctx, nil); err != nil {
			return err
		}
		_, err = c.Database("ucs").ListCollectionNames(ctx, map[string]any{})
		return err
	}
	if err := ping("mongodb://" + mu.Host + "/"); err == nil {
		t.Fatal("the embedded FerretDB took a client without TLS and certificate")
	}
	noCert := url.Values{"tls": {"true"}, "tlsCAFile": {mu.Query().Get("tlsCAFile")}}
	if err := ping("mongodb://" + mu.Host + "/?" + noCert.Encode()); err == nil {
		t.Fatal("the embedded FerretDB took a client without a certificate")
	}
	if err := ping(s.Info.MongoDBURI); err != nil {
		t.Fatalf("the generated client certificate: %v", err)
	}
	// A worker process joins with worker.yaml, which carries both.
	wc, err := config.Load(filepath.Join(dir, standalone.WorkerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(wc.NATS.URL, nats.Timeout(5*time.Second)); err != nil {
		t.Fatalf("worker.yaml's NATS URL: %v", err)
	} else {
		nc.Close()
	}
	if err := ping(wc.MongoDB.URI); err != nil {
		t.Fatalf("worker.yaml's MongoDB URI: %v", err)
	}

	// A restart keeps the credentials.
	natsURL := s.Info.NATSURL
	ca, _ := os.ReadFile(mu.Query().Get("tlsCAFile"))
	s.Close()
	s, err = standalone.Start(context.Background(), standalone.Options{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	u2, _ := url.Parse(s.Info.NATSURL)
	p1, _ := u.User.Password()
	p2, _ := u2.User.Password()
	ca2, _ := os.ReadFile(mu.Query().Get("tlsCAFile"))
	if p1 != p2 || string(ca) != string(ca2) || len(ca) == 0 || natsURL == "" {
		t.Fatal("a restart generated new credentials")
	}
	if err := ping(s.Info.MongoDBURI); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}
