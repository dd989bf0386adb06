module github.com/littlebigbrain/lbb/sdk/go

go 1.24.0
