// Command baseline is the yardstick of the push accept benchmark: the least a front end can do,
// an echo handler that publishes the raw body to a JetStream stream on file storage (an
// embedded NATS server in this process, as the standalone stack has) and answers once the
// stream acknowledged it. No token, no validation, no ucsId. It prints its address on the first
// line of standard output.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/campus-it/ucs/pkg/embedded"
)

func main() {
	dir := flag.String("data", "./baseline-data", "folder of the NATS server's files")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	flag.Parse()
	if err := run(*dir, *listen); err != nil {
		log.Fatal(err)
	}
}

func run(dir, listen string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := embedded.StartNATS(embedded.NATSOptions{Dir: dir})
	if err != nil {
		return err
	}
	defer n.Shutdown()
	nc, err := nats.Connect(n.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "BASELINE", Subjects: []string{"baseline.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		return err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/push", func(c echo.Context) error {
		body, err := io.ReadAll(io.LimitReader(c.Request().Body, 64<<10))
		if err != nil {
			return err
		}
		if _, err := js.Publish(c.Request().Context(), "baseline.push", body); err != nil {
			return err
		}
		return c.JSONBlob(http.StatusOK, []byte(`{"code":"A00000"}`))
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	hs := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = hs.Close() }()
	if err := hs.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
