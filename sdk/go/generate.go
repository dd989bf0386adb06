package lbb

// wire.gen.go is generated from internal/api/openapi.json, the one description of the API's
// wire types (docs/architecture.md, "Wire types"): oapi-codegen.yaml says which types,
// oapi-overlay.yaml their Go names. TestWireTypesCurrent fails when the file drifts.
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml ../../internal/api/openapi.json
