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
