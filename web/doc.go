// Package web is a dashboard for walq queues: an http.Handler that a
// service mounts under any path prefix, given its open queues, and that
// walq-inspect serve runs over a directory, read-only.
//
// Pages are rendered on the server with html/template from the queues'
// in-memory state and counters: an overview with one row per queue
// (counts by state, the oldest ready item's age, leases in flight against
// the cap, the pause, and the last hour of work as a small chart, from the
// record times in the log and then from sampled counters), each
// queue's items by state in ID order with keyset paging, the head of a
// queue in delivery order, exact filters (ID, key, put time) and a bounded
// search in errors and bodies that says how much it looked at, an item's
// page with its history and its body (escaped, cut, through an optional
// formatting or redacting hook), and its dead letters. Every page reads
// without script; a small script of its own (static/live.js, no third
// party code) keeps the counts live through server-sent events, from one
// broadcaster per queue, and stops while the tab is hidden.
//
// Actions (redrive, purge, pause until and resume, redrive or purge of
// every dead letter a filter matched, counted and confirmed first, and the
// deletion of a stored item in any state, walq.Queue.DeleteItems) are
// offered only where Options.Access or Options.Allow allows them, and
// checked on the server; Allow decides each Action, per queue and per
// item, so a request sees and changes only the queues it is given. Cross-origin requests are refused (http.CrossOriginProtection),
// every page carries a Content-Security-Policy that allows no inline
// script and no other host, every value is escaped, and a raw body is
// served as an attachment that no browser renders. Actions are logged
// through the queue's slog.Logger.
package web
