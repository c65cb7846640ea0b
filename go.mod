module github.com/walq/walq

go 1.26.0

require (
	github.com/tidwall/wal v1.2.1
	github.com/vmihailenco/msgpack/v5 v5.4.1
)

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/tidwall/gjson v1.10.2 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
	github.com/tidwall/tinylru v1.1.0 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
