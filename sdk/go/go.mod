module github.com/littlebigbrain/lbb/sdk/go

go 1.24.0

require github.com/coder/websocket v1.8.15 // indirect
