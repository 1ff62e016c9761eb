// Command judge is a tiny stand-in for a Judge server, for the hello-judge
// example and the quickstart: POST /submit answers with a verdict, GET /
// says it is alive. With --forbidden-listen it also serves, on a second
// address, a page an isolated container must not be able to fetch.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address of the judge")
	forbidden := flag.String("forbidden-listen", "", "also serve a decoy on this address (a destination isolated containers must not reach)")
	flag.Parse()

	judge := http.NewServeMux()
	judge.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "judge: alive")
	})
	judge.HandleFunc("/submit", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		log.Printf("judge: submission from %s: %q", r.RemoteAddr, body)
		fmt.Fprintf(w, "judge: received %d bytes from %s, verdict: accepted\n", len(body), r.RemoteAddr)
	})
	servers := []*http.Server{{Addr: *listen, Handler: judge, ReadHeaderTimeout: 10 * time.Second}}
	if *forbidden != "" {
		decoy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			log.Printf("decoy: request from %s", r.RemoteAddr)
			fmt.Fprintln(w, "decoy: an isolated container should never see this")
		})
		servers = append(servers, &http.Server{Addr: *forbidden, Handler: decoy, ReadHeaderTimeout: 10 * time.Second})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errc <- s.ListenAndServe() }()
		log.Printf("listening on http://%s", s.Addr)
	}
	select {
	case err := <-errc:
		log.Printf("judge: %v", err)
		os.Exit(1)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("judge: shutdown: %v", err)
		}
	}
}
