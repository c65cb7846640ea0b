package web_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/walq/walq"
	"github.com/walq/walq/web"
)

// A service mounts the dashboard under a prefix of its own mux, given its
// open queues, and decides per request what an operator may do.
func Example() {
	dir, err := os.MkdirTemp("", "walq-web-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	mail, err := q.OpenQueue("mail", walq.QueueOptions{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := mail.Put(context.Background(), []byte("welcome ann")); err != nil {
		log.Fatal(err)
	}

	src, err := web.Queues(q, mail)
	if err != nil {
		log.Fatal(err)
	}
	dash, err := web.New(src, web.Options{
		// Operators (here: whoever the service's auth marked) may act;
		// everyone else who reaches the page may only look.
		Access: func(r *http.Request) web.Access {
			if r.Header.Get("X-Operator") != "" {
				return web.FullAccess
			}
			return web.ReadOnly
		},
		// The name it is reached by (IP addresses and localhost always are).
		Hosts: []string{"ops.example.com"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer dash.Close()
	mux := http.NewServeMux()
	mux.Handle("/admin/queues/", http.StripPrefix("/admin/queues", dash))

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/admin/queues/q/mail/")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	fmt.Println(strings.Contains(string(page), `href="/admin/queues/q/mail/item/1"`))
	// Output:
	// 200 text/html; charset=utf-8
	// true
}

// Options.Allow decides each action, per queue and per item: here a
// team reads and redrives its own queues (named "<team>.<queue>"), and
// sees no other in the overview, its live counts or its pages.
func ExampleAction() {
	dir, err := os.MkdirTemp("", "walq-web-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	billing, err := q.OpenQueue("billing.invoices", walq.QueueOptions{})
	if err != nil {
		log.Fatal(err)
	}
	mail, err := q.OpenQueue("mail.welcome", walq.QueueOptions{})
	if err != nil {
		log.Fatal(err)
	}
	src, err := web.Queues(billing, mail)
	if err != nil {
		log.Fatal(err)
	}

	dash, err := web.New(src, web.Options{
		Allow: func(r *http.Request, a web.Action) bool {
			// The team the service's auth put the request in.
			team := r.Header.Get("X-Team")
			if team == "" {
				return false
			}
			switch a.Kind {
			case web.Browse:
				return true
			case web.Read, web.Redrive:
				return strings.HasPrefix(a.Queue, team+".")
			}
			return false
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer dash.Close()

	for _, path := range []string{"/q/billing.invoices/", "/q/mail.welcome/"} {
		req := httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil)
		req.Header.Set("X-Team", "billing")
		rec := httptest.NewRecorder()
		dash.ServeHTTP(rec, req)
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /q/billing.invoices/ 200
	// /q/mail.welcome/ 403
}
